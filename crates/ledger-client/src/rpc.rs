//! The ledger's unary RPCs as the client sees them, generated from the proto:
//! `ledger_proto::unary_rpcs!` lists them (its `build.rs` reads the descriptor),
//! and [`rpcs!`] makes of each the typed method of [`Client`](crate::Client), the
//! marker type the retry loop is generic over, and its line in [`METHODS`]. An
//! RPC added to the proto is a method here with no edit. `WatchEntries` (server
//! streaming) is not here: its resuming watcher is the `watch` module, beside
//! this one.

use std::marker::PhantomData;

use bytes::{Buf as _, BufMut as _, Bytes};
use ledger_proto::pb;
use prost::Message;
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic_prost::ProstDecoder;

/// A unary RPC of `ledger.v1.Ledger`.
pub(crate) trait Rpc {
    type Request: Message;
    type Reply: Message + Default + Send + Sync + 'static;
    /// The full gRPC method name, as a `KeyRecord` stores it.
    const PATH: &'static str;
    /// The request's idempotency key, for a keyed RPC.
    fn key(request: &mut Self::Request) -> Option<&mut String>;
}

/// One RPC of the service, as [`METHODS`] lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Method {
    /// The RPC's name in the proto.
    pub name: &'static str,
    /// The full gRPC method name: `/ledger.v1.Ledger/` and its name.
    pub path: &'static str,
    /// Whether its request carries the call's idempotency key.
    pub keyed: bool,
}

/// The callback of `ledger_proto::unary_rpcs!`: everything the client has of
/// each unary RPC.
macro_rules! rpcs {
    ($( $(#[$doc:meta])* $call:ident: $name:ident($request:ident) -> $reply:ident, $kind:ident; )*) => {
        pub(crate) mod marker {
            $( pub(crate) struct $name; )*
        }

        $(
            impl Rpc for marker::$name {
                type Request = pb::$request;
                type Reply = pb::$reply;
                const PATH: &'static str = concat!("/ledger.v1.Ledger/", stringify!($name));
                fn key(request: &mut pb::$request) -> Option<&mut String> {
                    rpcs!(@key $kind request)
                }
            }
        )*

        /// Every unary RPC the client calls, in the proto's order.
        pub const METHODS: &[Method] = &[$(
            Method {
                name: stringify!($name),
                path: concat!("/ledger.v1.Ledger/", stringify!($name)),
                keyed: rpcs!(@keyed $kind),
            },
        )*];

        impl crate::Client {
            $( rpcs!(@method $kind $(#[$doc])* $call: $name($request) -> $reply); )*
        }
    };
    (@method keyed $(#[$doc:meta])* $call:ident: $name:ident($request:ident) -> $reply:ident) => {
        $(#[$doc])*
        ///
        /// Keyed: a request without an `idempotency_key` gets a new one (a
        /// UUIDv7) before the first attempt, every attempt resends the same
        /// bytes, and an outcome the budget leaves unknown is settled with
        /// `LookupKey` or ends in [`Error::Unknown`](crate::Error::Unknown) with
        /// the key to retry with.
        pub async fn $call(
            &self,
            request: pb::$request,
        ) -> Result<crate::Answer<pb::$reply>, crate::Error> {
            self.call::<marker::$name>(request).await
        }
    };
    (@method read $(#[$doc:meta])* $call:ident: $name:ident($request:ident) -> $reply:ident) => {
        $(#[$doc])*
        pub async fn $call(
            &self,
            request: pb::$request,
        ) -> Result<crate::Answer<pb::$reply>, crate::Error> {
            self.call::<marker::$name>(request).await
        }
    };
    (@key keyed $request:ident) => { Some(&mut $request.idempotency_key) };
    (@key read $request:ident) => {{ let _ = $request; None }};
    (@keyed keyed) => { true };
    (@keyed read) => { false };
}

ledger_proto::unary_rpcs!(rpcs);

/// A codec the retry loop sends a request's bytes with (encoded once, the same
/// on every attempt) and reads the reply by: typed ([`PreEncoded`]) or
/// encoded ([`Raw`]).
pub(crate) trait ReplyCodec:
    Codec<Encode = Bytes, Decode: Send + Sync + 'static> + Default + Send + 'static
{
}

impl<C> ReplyCodec for C where
    C: Codec<Encode = Bytes, Decode: Send + Sync + 'static> + Default + Send + 'static
{
}

/// A codec whose requests are already encoded: a retry resends the very bytes of
/// the first attempt, not a re-encoding of the message.
pub(crate) struct PreEncoded<U>(PhantomData<fn() -> U>);

impl<U> Default for PreEncoded<U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<U: Message + Default + Send + Sync + 'static> Codec for PreEncoded<U> {
    type Encode = Bytes;
    type Decode = U;
    type Encoder = BytesEncoder;
    type Decoder = ProstDecoder<U>;

    fn encoder(&mut self) -> BytesEncoder {
        BytesEncoder
    }

    fn decoder(&mut self) -> ProstDecoder<U> {
        ProstDecoder::default()
    }
}

pub(crate) struct BytesEncoder;

impl Encoder for BytesEncoder {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

/// A codec whose requests are already encoded and whose replies stay encoded:
/// a call of a method named at run time
/// ([`Client::call_encoded`](crate::Client::call_encoded)).
#[derive(Default)]
pub(crate) struct Raw;

impl Codec for Raw {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = BytesEncoder;
    type Decoder = BytesDecoder;

    fn encoder(&mut self) -> BytesEncoder {
        BytesEncoder
    }

    fn decoder(&mut self) -> BytesDecoder {
        BytesDecoder
    }
}

pub(crate) struct BytesDecoder;

impl Decoder for BytesDecoder {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}
