//! The protobuf codec of the generated service: prost's, except that
//!
//! - a request that is not a valid message (a string field that is not UTF-8, a
//!   truncated field) is the caller's error, INVALID_ARGUMENT, where prost's codec
//!   says INTERNAL;
//! - a message in which one field occurs more than [`MAX_OCCURRENCES`] times is
//!   refused before it is decoded, as INVALID_ARGUMENT naming the field. Decoding
//!   is where a message grows: an empty element of a repeated field is two bytes
//!   on the wire and a struct of some 80 in memory, so a request of 1 MiB of empty
//!   legs took 38 MiB to decode before its 256-leg limit could refuse it. Under
//!   the bound, what a message decodes to is its own bytes and a few hundred
//!   KiB at most.

use std::collections::HashMap;
use std::sync::LazyLock;

use prost::Message;
use prost::bytes::Buf as _;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic::{Code, Status};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};
use tonic_types::{ErrorDetails, StatusExt as _};

use crate::ERROR_DOMAIN;

/// The most times one field may occur in a message: well above any message of the
/// contract (a post holds at most 256 legs and 50 pairs of metadata, a page at
/// most 1,000 entries, a post's reply 512).
pub const MAX_OCCURRENCES: usize = 4096;

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
        let message = buf.chunk();
        if message.len() == buf.remaining()
            && let Some(field) = overfull_field(message)
        {
            return Err(too_many::<U>(field));
        }
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

/// The number of a field that occurs more than [`MAX_OCCURRENCES`] times in the
/// encoded `message`, read without decoding it. A message malformed before that is
/// left to the decoder, which says what is wrong with it.
fn overfull_field(mut message: &[u8]) -> Option<u32> {
    use prost::encoding::{DecodeContext, decode_key, skip_field};
    // (field number, occurrences): a message has a handful of fields.
    let mut seen: Vec<(u32, usize)> = Vec::new();
    while !message.is_empty() {
        let (number, wire_type) = decode_key(&mut message).ok()?;
        let at = seen
            .iter()
            .position(|(n, _)| *n == number)
            .unwrap_or_else(|| {
                seen.push((number, 0));
                seen.len() - 1
            });
        let count = &mut seen.get_mut(at)?.1;
        *count += 1;
        if *count > MAX_OCCURRENCES {
            return Some(number);
        }
        skip_field(wire_type, number, &mut message, DecodeContext::default()).ok()?;
    }
    None
}

/// INVALID_ARGUMENT for a message of type `U` in which field `number` occurs too
/// often, naming the field as the contract does.
fn too_many<U>(number: u32) -> Status {
    let message = std::any::type_name::<U>().rsplit("::").next().unwrap_or("");
    let field = FIELD_NAMES
        .get(&(message.to_owned(), number))
        .cloned()
        .unwrap_or_else(|| format!("field {number}"));
    let description =
        format!("more than {MAX_OCCURRENCES} occurrences; the request was refused unread");
    let mut details =
        ErrorDetails::with_error_info("INVALID_REQUEST", ERROR_DOMAIN, HashMap::new());
    details.add_bad_request_violation(field.clone(), description.clone());
    Status::with_error_details(
        Code::InvalidArgument,
        format!("invalid request: {field}: {description}"),
        details,
    )
}

/// Each field's name by its message's name and its number, from the contract's
/// descriptors.
static FIELD_NAMES: LazyLock<HashMap<(String, u32), String>> = LazyLock::new(|| {
    let Ok(set) = prost_types::FileDescriptorSet::decode(crate::pb::FILE_DESCRIPTOR_SET) else {
        return HashMap::new();
    };
    set.file
        .iter()
        .flat_map(|file| &file.message_type)
        .flat_map(|message| {
            message.field.iter().filter_map(|field| {
                let number = u32::try_from(field.number?).ok()?;
                Some(((message.name().to_owned(), number), field.name().to_owned()))
            })
        })
        .collect()
});

#[cfg(test)]
mod tests {
    use prost::Message as _;
    use tonic::Code;
    use tonic_types::StatusExt as _;

    use super::{MAX_OCCURRENCES, overfull_field, too_many};
    use crate::pb;

    fn post(legs: usize, pairs: usize) -> Vec<u8> {
        pb::PostRequest {
            idempotency_key: "k".into(),
            legs: vec![pb::Leg::default(); legs],
            metadata: (0..pairs)
                .map(|i| (format!("k{i}"), String::new()))
                .collect(),
            ..Default::default()
        }
        .encode_to_vec()
    }

    #[test]
    fn a_field_within_the_bound_passes_and_one_past_it_is_found() {
        assert_eq!(
            overfull_field(&post(MAX_OCCURRENCES, MAX_OCCURRENCES)),
            None
        );
        assert_eq!(overfull_field(&post(MAX_OCCURRENCES + 1, 0)), Some(2));
        assert_eq!(overfull_field(&post(1, MAX_OCCURRENCES + 1)), Some(4));
        assert_eq!(overfull_field(&[]), None);
    }

    #[test]
    fn a_malformed_message_is_left_to_the_decoder() {
        let mut truncated = post(3, 0);
        truncated.truncate(truncated.len() - 1);
        assert_eq!(overfull_field(&truncated), None);
        assert_eq!(overfull_field(&[0xff]), None);
    }

    #[test]
    fn the_refusal_names_the_field_as_the_contract_does() {
        let status = too_many::<pb::PostRequest>(2);
        assert_eq!(status.code(), Code::InvalidArgument);
        assert!(
            status
                .message()
                .starts_with("invalid request: legs: more than 4096")
        );
        let info = status.get_details_error_info().expect("ErrorInfo");
        assert_eq!(info.reason, "INVALID_REQUEST");
        let bad = status.get_details_bad_request().expect("BadRequest");
        assert_eq!(bad.field_violations[0].field, "legs");
        assert_eq!(
            too_many::<pb::PostRequest>(99).message().split(' ').nth(2),
            Some("field")
        );
        assert!(
            too_many::<pb::PostRequest>(99)
                .message()
                .contains("field 99:")
        );
    }
}
