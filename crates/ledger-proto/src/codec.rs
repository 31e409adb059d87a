//! The protobuf codec of the generated service: prost's, except that a request
//! that is not a valid message (a string field that is not UTF-8, a truncated
//! field) is the caller's error, INVALID_ARGUMENT, where prost's codec says
//! INTERNAL.

use std::collections::HashMap;

use prost::Message;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic::{Code, Status};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};
use tonic_types::{ErrorDetails, StatusExt as _};

use crate::ERROR_DOMAIN;

#[derive(Debug, Clone, Default)]
pub struct LedgerCodec<T, U>(ProstCodec<T, U>);

impl<T, U> Codec for LedgerCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = LedgerDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        self.0.encoder()
    }

    fn decoder(&mut self) -> Self::Decoder {
        LedgerDecoder(self.0.decoder())
    }
}

#[derive(Debug, Clone)]
pub struct LedgerDecoder<U>(ProstDecoder<U>);

impl<U: Message + Default> Decoder for LedgerDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        self.0.decode(buf).map_err(|e| {
            Status::with_error_details(
                Code::InvalidArgument,
                format!(
                    "the request is not a valid protobuf message: {}",
                    e.message()
                ),
                ErrorDetails::with_error_info("INVALID_REQUEST", ERROR_DOMAIN, HashMap::new()),
            )
        })
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.0.buffer_settings()
    }
}
