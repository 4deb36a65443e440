//! Typed services: arguments and results as serde values, encoded with
//! postcard, over the zero-copy layer — for callers who need no control
//! over where bytes land.
//!
//! A value travels as two pieces: its encoded length (EXPRESS), then its
//! bytes (CHEAPER: by rendezvous when large, straight into the buffer the
//! receiver allocated for them).

use navette_core::Rank;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{HandlerError, HandlerMode, Reply, RpcError, ServiceName};
use crate::{Error, Node, Packing, ReceiveMode, Result, SendMode, Unpacking};

/// Longest encoded value accepted from a peer: its length comes first, and
/// the receiver allocates that much before the bytes come.
pub const MAX_TYPED_LEN: usize = 64 << 20;

impl Node {
    /// Registers the service `name` whose handler takes the caller's rank
    /// and a decoded argument, and returns a value sent back encoded (or
    /// an error, which the caller gets as [`RpcError::Handler`]).
    pub fn register_typed_service<A, R, F>(
        &self,
        name: &str,
        mode: HandlerMode,
        handler: F,
    ) -> Result<()>
    where
        A: DeserializeOwned,
        R: Serialize,
        F: Fn(Rank, A) -> Result<R, HandlerError> + Send + Sync + 'static,
    {
        let service = name.to_owned();
        self.register_service(name, mode, move |call| {
            let from = call.from();
            let (args, responder) = call.split();
            let args: A = receive_value(args)
                .map_err(|e| HandlerError::new(format!("arguments of {service:?}: {e}")))?;
            let result = handler(from, args)?;
            let bytes = postcard::to_allocvec(&result)?;
            responder.reply(|msg| pack_value(msg, bytes))?;
            Ok(())
        })
    }

    /// Calls the typed service `service` at rank `peer` with `args` and
    /// waits for its result.
    pub fn call_typed<A: Serialize, R: DeserializeOwned>(
        &self,
        peer: Rank,
        service: impl Into<ServiceName>,
        args: &A,
    ) -> Result<R> {
        let service = service.into();
        let bytes = encode(&service, args)?;
        let reply = self
            .call(peer, &service, |msg| pack_value(msg, bytes))?
            .wait()?;
        decode_reply(reply, &service)
    }

    /// [`Self::call_typed`] as a future, for any executor.
    pub async fn call_typed_async<A: Serialize, R: DeserializeOwned>(
        &self,
        peer: Rank,
        service: impl Into<ServiceName>,
        args: &A,
    ) -> Result<R> {
        let service = service.into();
        let bytes = encode(&service, args)?;
        let reply = self
            .call(peer, &service, |msg| pack_value(msg, bytes))?
            .await?;
        decode_reply(reply, &service)
    }

    /// Calls the typed service `service` at rank `peer` with `args`, with
    /// no result.
    pub fn call_typed_one_way<A: Serialize>(
        &self,
        peer: Rank,
        service: impl Into<ServiceName>,
        args: &A,
    ) -> Result<()> {
        let service = service.into();
        let bytes = encode(&service, args)?;
        self.call_one_way(peer, &service, |msg| pack_value(msg, bytes))
    }
}

fn encode<A: Serialize>(service: &ServiceName, args: &A) -> Result<Vec<u8>> {
    postcard::to_allocvec(args).map_err(|e| {
        RpcError::Encoding {
            service: service.to_string(),
            message: format!("cannot encode the arguments: {e}"),
        }
        .into()
    })
}

/// The result a typed call's reply carries.
fn decode_reply<R: DeserializeOwned>(reply: Reply<'_>, service: &ServiceName) -> Result<R> {
    match receive_value(reply.unpacking()) {
        Err(Error::Rpc(RpcError::Encoding { message, .. })) => Err(RpcError::Encoding {
            service: service.to_string(),
            message: format!("the result: {message}"),
        }
        .into()),
        other => other,
    }
}

/// Packs an encoded value: its length, then its bytes, shared with the
/// message (never copied, even by a call that returns at once).
fn pack_value(msg: &mut Packing<'_, '_>, bytes: Vec<u8>) -> Result<()> {
    let len = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    msg.pack_safer(&len.to_le_bytes(), ReceiveMode::Express)?;
    if !bytes.is_empty() {
        msg.pack_bytes(bytes, ReceiveMode::Cheaper)?;
    }
    Ok(())
}

/// Unpacks and decodes a value packed by [`pack_value`], and ends the
/// message.
fn receive_value<T: DeserializeOwned>(msg: Unpacking<'_, 'static>) -> Result<T> {
    // Its CHEAPER piece lands in a buffer of this function's.
    let mut msg: Unpacking<'_, '_> = msg;
    let mut len = [0u8; 8];
    msg.unpack_express(&mut len, SendMode::Safer)?;
    let len = u64::from_le_bytes(len);
    let Some(len) = usize::try_from(len).ok().filter(|&n| n <= MAX_TYPED_LEN) else {
        return Err(RpcError::Encoding {
            service: String::new(),
            message: format!("a value of {len} bytes, above the {MAX_TYPED_LEN} accepted"),
        }
        .into());
    };
    let mut bytes = vec![0u8; len];
    if len > 0 {
        msg.unpack_cheaper(&mut bytes, SendMode::Cheaper)?;
    }
    msg.end_unpacking()?;
    postcard::from_bytes(&bytes).map_err(|e| {
        RpcError::Encoding {
            service: String::new(),
            message: format!("cannot decode: {e}"),
        }
        .into()
    })
}
