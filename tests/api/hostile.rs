//! Hostile input: arbitrary request fields (control characters, non-ASCII, extreme
//! integers, huge descriptions) and arbitrary bytes in place of a message get a
//! success or a documented error: never INTERNAL, never a panic, never a broken
//! ledger.

use bytes::Bytes;
use ledger::proto::pb;
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestRunner};
use tonic::Code;
use tonic_types::StatusExt as _;

use crate::support::{TestApp, TestDb, assert_audit_passes, raw_call};

/// The codes the contract documents for a request's own faults and outcomes.
const DOCUMENTED: &[Code] = &[
    Code::Ok,
    Code::InvalidArgument,
    Code::FailedPrecondition,
    Code::NotFound,
    Code::ResourceExhausted,
];

#[derive(Debug, Clone)]
enum Call {
    Open(pb::OpenAccountRequest),
    Credit(pb::CreditRequest),
    Charge(pb::ChargeRequest),
    Get(pb::GetAccountRequest),
    Post(pb::PostRequest),
    List(pb::ListEntriesRequest),
    Garbage(&'static str, Vec<u8>),
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[!-~]{1,20}",
        "\\PC{0,40}",
        ".{0,40}",
        "[\\x00-\\x1f\\x7f]{0,8}",
        (0_usize..3).prop_map(|n| "é".repeat(499 + n)),
        (0_usize..2).prop_map(|n| "x".repeat([255, 256, 70_000][n])),
        Just(String::new()),
    ]
}

fn amount() -> impl Strategy<Value = i64> {
    prop_oneof![
        1_i64..1000,
        Just(0),
        Just(-1),
        Just(i64::MIN),
        Just(i64::MAX),
        any::<i64>()
    ]
}

fn account(known: u64) -> impl Strategy<Value = u64> {
    prop_oneof![Just(known), Just(0), Just(u64::MAX), any::<u64>()]
}

fn currency() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("USD".to_owned()),
        Just("EUR".to_owned()),
        "[A-Za-z]{0,4}",
        ".{0,4}"
    ]
}

/// A post of 0 to 3 legs, or, now and then, of 255 to 257 legs.
fn post(known: u64) -> impl Strategy<Value = pb::PostRequest> {
    let leg = move || {
        (account(known), account(known), amount(), currency(), text()).prop_map(
            |(from_account_id, to_account_id, amount, currency, description)| pb::Leg {
                from_account_id,
                to_account_id,
                amount,
                currency,
                description,
            },
        )
    };
    let legs = prop_oneof![
        prop::collection::vec(leg(), 0..4),
        (255_usize..258, leg()).prop_map(|(n, leg)| vec![leg; n]),
    ];
    (text(), legs, text()).prop_map(|(idempotency_key, legs, description)| pb::PostRequest {
        idempotency_key,
        legs,
        description,
        ..Default::default()
    })
}

/// A page of an account's entries, with a token that may belong to another
/// account, be forged, or be garbage.
fn list(known: u64) -> impl Strategy<Value = pb::ListEntriesRequest> {
    (account(known), any::<i32>(), ".{0,64}").prop_map(|(account_id, page_size, page_token)| {
        pb::ListEntriesRequest {
            account_id,
            page_size,
            page_token,
        }
    })
}

fn call(known: u64) -> impl Strategy<Value = Call> {
    let posting = || (text(), account(known), amount(), currency(), text());
    prop_oneof![
        (text(), currency()).prop_map(|(idempotency_key, currency)| Call::Open(
            pb::OpenAccountRequest {
                idempotency_key,
                currency,
                ..Default::default()
            }
        )),
        posting().prop_map(
            |(idempotency_key, account_id, amount, currency, description)| {
                Call::Credit(pb::CreditRequest {
                    idempotency_key,
                    account_id,
                    amount,
                    currency,
                    description,
                    ..Default::default()
                })
            }
        ),
        posting().prop_map(
            |(idempotency_key, account_id, amount, currency, description)| {
                Call::Charge(pb::ChargeRequest {
                    idempotency_key,
                    account_id,
                    amount,
                    currency,
                    description,
                    ..Default::default()
                })
            }
        ),
        account(known).prop_map(|account_id| Call::Get(pb::GetAccountRequest { account_id })),
        post(known).prop_map(Call::Post),
        list(known).prop_map(Call::List),
        (
            prop::sample::select(vec![
                "OpenAccount",
                "Credit",
                "Charge",
                "GetAccount",
                "Post",
                "ListEntries",
            ]),
            prop_oneof![
                prop::collection::vec(any::<u8>(), 0..64),
                // A key field (1) holding bytes that are not UTF-8.
                prop::collection::vec(0x80_u8..=0xff, 1..20).prop_map(|b| {
                    let mut m = vec![0x0a, u8::try_from(b.len()).unwrap()];
                    m.extend(b);
                    m
                }),
            ]
        )
            .prop_map(|(method, bytes)| Call::Garbage(method, bytes)),
    ]
}

async fn send(app: &TestApp, call: Call) -> Code {
    let channel = app.channel().await;
    let answer = match call {
        Call::Open(r) => raw_call(channel, "OpenAccount", r).await,
        Call::Credit(r) => raw_call(channel, "Credit", r).await,
        Call::Charge(r) => raw_call(channel, "Charge", r).await,
        Call::Get(r) => raw_call(channel, "GetAccount", r).await,
        Call::Post(r) => raw_call(channel, "Post", r).await,
        Call::List(r) => raw_call(channel, "ListEntries", r).await,
        Call::Garbage(method, bytes) => {
            raw_call(channel, method, RawMessage(Bytes::from(bytes))).await
        }
    };
    answer.map_or_else(|s| s.code(), |_| Code::Ok)
}

/// Bytes sent as they are, in place of a message.
#[derive(Debug, Clone, Default)]
struct RawMessage(Bytes);

impl prost::Message for RawMessage {
    fn encode_raw(&self, buf: &mut impl bytes::BufMut) {
        buf.put_slice(&self.0);
    }

    fn merge_field(
        &mut self,
        _: u32,
        _: prost::encoding::WireType,
        _: &mut impl bytes::Buf,
        _: prost::encoding::DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        Ok(())
    }

    fn encoded_len(&self) -> usize {
        self.0.len()
    }

    fn clear(&mut self) {
        self.0 = Bytes::new();
    }
}

// proptest's failure carries the failing case: a request, however large.
#[allow(clippy::result_large_err)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn arbitrary_requests_get_documented_answers() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let known = app.funded_account("USD", 1_000_000).await;
    let handle = tokio::runtime::Handle::current();
    let mut runner = TestRunner::new(ProptestConfig {
        cases: 600,
        ..ProptestConfig::default()
    });
    let outcome = tokio::task::block_in_place(|| {
        runner.run(&call(known), |call| {
            let shown = format!("{call:?}").chars().take(300).collect::<String>();
            let code = handle.block_on(send(&app, call));
            prop_assert!(DOCUMENTED.contains(&code), "{code:?} for {shown}");
            Ok(())
        })
    });
    outcome.unwrap();
    assert_audit_passes(&db.url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_that_is_not_utf8_is_an_invalid_argument() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    // Field 1 (idempotency_key), length 2, bytes 0xff 0xfe.
    let message = RawMessage(Bytes::from_static(&[0x0a, 0x02, 0xff, 0xfe]));
    let status = raw_call(app.channel().await, "Charge", message)
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert_eq!(
        status.get_details_error_info().unwrap().reason,
        "INVALID_REQUEST"
    );
}
