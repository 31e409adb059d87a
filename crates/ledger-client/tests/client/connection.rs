//! The connection options: TLS with a CA certificate, a bearer token.

use ledger::config::TlsIdentity;
use ledger::grpc::auth::Tokens;
use ledger_client::{Client, Error, Reason, pb};

use crate::support::{TestApp, TestDb};

fn open(key: &str) -> pb::OpenAccountRequest {
    pb::OpenAccountRequest {
        idempotency_key: key.into(),
        currency: "USD".into(),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn tls_with_the_servers_ca() {
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let cert_pem = certified.cert.pem();
    let identity = TlsIdentity::from_pem(
        cert_pem.clone().into_bytes(),
        certified.signing_key.serialize_pem().into_bytes(),
    )
    .unwrap();
    let db = TestDb::new();
    let app = TestApp::spawn_with(&db, |settings| settings.tls = Some(identity)).await;
    let client = Client::builder()
        .endpoint(format!("https://{}", app.addr))
        .ca_certificate(cert_pem)
        .tls_domain("localhost")
        .build()
        .unwrap();

    let answer = client.open_account(open("tls-1")).await.unwrap();

    assert_eq!(answer.reply.account.unwrap().currency, "USD");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bearer_token_is_sent_with_every_call() {
    use sha2::Digest as _;
    use std::fmt::Write as _;
    let hash = sha2::Sha256::digest(b"shop-secret")
        .iter()
        .fold(String::new(), |mut hex, b| {
            let _ = write!(hex, "{b:02x}");
            hex
        });
    let tokens = Tokens::parse(&format!("shop {hash}\n")).unwrap();
    let db = TestDb::new();
    let app = TestApp::spawn_with(&db, |settings| settings.auth = Some(tokens)).await;
    let with_token = Client::builder()
        .endpoint(app.url())
        .token("shop-secret")
        .build()
        .unwrap();

    let answer = with_token.open_account(open("token-1")).await;
    let without = app.client().open_account(open("token-2")).await;

    assert!(answer.is_ok(), "{answer:?}");
    let Err(Error::Declined(decline)) = without else {
        panic!("expected UNAUTHENTICATED, got {without:?}");
    };
    assert_eq!(decline.code, tonic::Code::Unauthenticated);
    assert_eq!(decline.reason, Reason::Unauthenticated);
}
