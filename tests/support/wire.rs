//! Requests and answers as the wire carries them: request builders, the replay
//! marker, and calls whose replies come back as raw bytes.

use std::time::Duration;

use bytes::{Buf as _, BufMut as _, Bytes};
use ledger::proto::pb;
use ledger::proto::pb::ledger_client::LedgerClient;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::Channel;

pub fn charge(key: &str, account_id: u64, amount: i64) -> pb::ChargeRequest {
    pb::ChargeRequest {
        idempotency_key: key.into(),
        account_id,
        amount,
        currency: "USD".into(),
        description: String::new(),
        ..Default::default()
    }
}

pub fn credit(key: &str, account_id: u64, amount: i64) -> pb::CreditRequest {
    pb::CreditRequest {
        idempotency_key: key.into(),
        account_id,
        amount,
        currency: "USD".into(),
        description: String::new(),
        ..Default::default()
    }
}

pub fn transfer(key: &str, from: u64, to: u64, amount: i64) -> pb::TransferRequest {
    pb::TransferRequest {
        idempotency_key: key.into(),
        from_account_id: from,
        to_account_id: to,
        amount,
        currency: "USD".into(),
        description: String::new(),
        ..Default::default()
    }
}

/// A leg of a post, in USD.
pub fn leg(from: u64, to: u64, amount: i64) -> pb::Leg {
    pb::Leg {
        from_account_id: from,
        to_account_id: to,
        amount,
        currency: "USD".into(),
        description: String::new(),
    }
}

pub fn post(key: &str, legs: Vec<pb::Leg>) -> pb::PostRequest {
    pb::PostRequest {
        idempotency_key: key.into(),
        legs,
        description: String::new(),
        ..Default::default()
    }
}

/// A Reverse of the operation under `original`.
pub fn reverse(key: &str, original: &str) -> pb::ReverseRequest {
    pb::ReverseRequest {
        idempotency_key: key.into(),
        original_key: original.into(),
        ..Default::default()
    }
}

pub fn refund(key: &str, entry_id: u64, amount: i64) -> pb::RefundRequest {
    pb::RefundRequest {
        idempotency_key: key.into(),
        entry_id,
        amount,
        description: String::new(),
        ..Default::default()
    }
}

pub fn place_hold(key: &str, account_id: u64, amount: i64, ttl: Duration) -> pb::PlaceHoldRequest {
    pb::PlaceHoldRequest {
        idempotency_key: key.into(),
        account_id,
        amount,
        currency: "USD".into(),
        description: String::new(),
        ttl: Some(prost_types::Duration {
            seconds: i64::try_from(ttl.as_secs()).unwrap(),
            nanos: i32::try_from(ttl.subsec_nanos()).unwrap(),
        }),
        ..Default::default()
    }
}

pub fn capture(key: &str, hold_id: u64, amount: i64) -> pb::CaptureHoldRequest {
    pb::CaptureHoldRequest {
        idempotency_key: key.into(),
        hold_id,
        amount,
        description: String::new(),
        ..Default::default()
    }
}

/// Limits: a floor (`None`: no floor) and a ceiling (`None`: none).
pub fn limits(floor: Option<i64>, ceiling: Option<i64>) -> pb::AccountLimits {
    pb::AccountLimits {
        min_balance: floor.unwrap_or(0),
        no_min_balance: floor.is_none(),
        max_balance: ceiling,
    }
}

pub fn open_account(key: &str, limits: Option<pb::AccountLimits>) -> pb::OpenAccountRequest {
    pb::OpenAccountRequest {
        idempotency_key: key.into(),
        currency: "USD".into(),
        limits,
        ..Default::default()
    }
}

pub fn set_limits(key: &str, account_id: u64, limits: pb::AccountLimits) -> pb::SetLimitsRequest {
    pb::SetLimitsRequest {
        idempotency_key: key.into(),
        account_id,
        limits: Some(limits),
    }
}

pub fn void(key: &str, hold_id: u64) -> pb::VoidHoldRequest {
    pb::VoidHoldRequest {
        idempotency_key: key.into(),
        hold_id,
    }
}

/// The `ErrorInfo` reason of a status.
pub fn reason(status: &tonic::Status) -> String {
    use tonic_types::StatusExt as _;
    status
        .get_details_error_info()
        .map(|info| info.reason)
        .unwrap_or_default()
}

/// The `ErrorInfo` metadata value `key` of a status.
pub fn info(status: &tonic::Status, key: &str) -> Option<String> {
    use tonic_types::StatusExt as _;
    status
        .get_details_error_info()
        .and_then(|info| info.metadata.get(key).cloned())
}

/// Whether a response or status carries `idempotent-replayed: true`.
pub fn replayed(metadata: &tonic::metadata::MetadataMap) -> bool {
    metadata
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true")
}

/// A unary call whose reply comes back as the raw bytes on the wire, to compare
/// replies byte for byte.
pub async fn raw_call(
    channel: Channel,
    method: &'static str,
    request: impl prost::Message,
) -> Result<(tonic::metadata::MetadataMap, Bytes), tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready()
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let path = format!("/ledger.v1.Ledger/{method}").parse().unwrap();
    let response = grpc
        .unary(
            tonic::Request::new(Bytes::from(request.encode_to_vec())),
            path,
            RawCodec,
        )
        .await?;
    let (metadata, body, _) = response.into_parts();
    Ok((metadata, body))
}

/// A call that sends its headers (with a deadline of `timeout`, if any) and
/// never a byte of its request.
pub async fn silent_call(
    channel: Channel,
    method: &'static str,
    timeout: Option<std::time::Duration>,
) -> Result<Bytes, tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready()
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let path = format!("/ledger.v1.Ledger/{method}").parse().unwrap();
    let mut request = tonic::Request::new(futures::stream::pending::<Bytes>());
    if let Some(timeout) = timeout {
        request.set_timeout(timeout);
    }
    let response = grpc.client_streaming(request, path, RawCodec).await?;
    Ok(response.into_inner())
}

#[derive(Debug, Clone, Copy, Default)]
struct RawCodec;

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> Self::Encoder {
        RawCodec
    }

    fn decoder(&mut self) -> Self::Decoder {
        RawCodec
    }
}

impl Encoder for RawCodec {
    type Item = Bytes;
    type Error = tonic::Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = Bytes;
    type Error = tonic::Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, tonic::Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

/// A request that carries a deadline (`grpc-timeout`).
pub fn with_deadline<T>(message: T, deadline: Duration) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(deadline);
    request
}

/// A tokens-file line: the client and `printf '%s' token | sha256sum`.
pub fn token_line(client: &str, token: &str) -> String {
    use sha2::Digest as _;
    use std::fmt::Write as _;
    let hash = sha2::Sha256::digest(token.as_bytes())
        .iter()
        .fold(String::new(), |mut hex, b| {
            let _ = write!(hex, "{b:02x}");
            hex
        });
    format!("{client} {hash}\n")
}

/// Sends `authorization: Bearer <token>` with every call.
#[derive(Clone, Copy)]
pub struct Bearer(pub &'static str);

impl tonic::service::Interceptor for Bearer {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        let value = format!("Bearer {}", self.0).parse().unwrap();
        request.metadata_mut().insert("authorization", value);
        Ok(request)
    }
}

pub fn with_token(
    channel: Channel,
    token: &'static str,
) -> LedgerClient<tonic::service::interceptor::InterceptedService<Channel, Bearer>> {
    LedgerClient::with_interceptor(channel, Bearer(token))
}

/// `name{labels}` -> value of every integral series, from the Prometheus text
/// format (counts and gauges; histogram sums are left out).
pub async fn scrape(addr: std::net::SocketAddr) -> std::collections::HashMap<String, u64> {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\n\r\n")
        .await
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let (_, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.rsplit_once(' '))
        .filter_map(|(series, value)| Some((series.to_owned(), value.parse().ok()?)))
        .collect()
}

/// `text` in hexadecimal, as a batch's statements write a key.
pub fn hex(text: &str) -> String {
    use std::fmt::Write as _;
    text.bytes().fold(String::new(), |mut hex, b| {
        let _ = write!(hex, "{b:02x}");
        hex
    })
}
