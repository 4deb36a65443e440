//! Feeds arbitrary bytes to every navette-wire decoder: `Packet::decode`
//! (walking the chunks when it succeeds), `PacketHeader::decode`,
//! `Hello::decode` and `Proof::decode`.
//!
//! The logic lives in `navette_wire::fuzzing::fuzz_decode`, which
//! `crates/navette-wire/tests/corpus.rs` also runs over the committed seed
//! corpus, so a normal `cargo test` replays what the fuzzer starts from.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let _ = navette_wire::fuzzing::fuzz_decode(bytes);
});
