//! Maxima that the decoder enforces on every length it reads.

/// Bounds applied while decoding; a length above its bound is an error,
/// whatever the bytes present.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest packet body, in bytes (header excluded).
    pub max_body_len: u32,
    /// Largest number of chunks in one packet.
    pub max_chunks: u16,
    /// Largest data payload of one eager chunk.
    pub max_eager_len: u32,
    /// Largest data payload of one rendezvous data chunk.
    pub max_fragment_len: u32,
    /// Largest total length announced by a rendezvous request.
    pub max_message_len: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_body_len: 64 << 20,
            max_chunks: 1024,
            max_eager_len: 1 << 20,
            max_fragment_len: 64 << 20,
            max_message_len: 1 << 40,
        }
    }
}
