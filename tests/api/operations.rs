//! What operators rely on: reflection, authentication with per-client keys, TLS,
//! and the message size limit.

use ledger::config::TlsIdentity;
use ledger::grpc::auth::Tokens;
use ledger::proto::pb;
use ledger::proto::pb::ledger_client::LedgerClient;
use tonic::Code;
use tonic::transport::{Certificate, Channel, ClientTlsConfig};
use tonic_reflection::pb::v1 as reflection_v1;
use tonic_reflection::pb::v1alpha as reflection_v1alpha;
use tonic_types::StatusExt as _;

use crate::support::{Config, TestApp, TestDb, charge, replayed, token_line, with_token};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_lists_every_service_in_both_versions() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let expected = [
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
        "grpc.reflection.v1alpha.ServerReflection",
        "ledger.v1.Ledger",
    ];

    let mut v1 =
        reflection_v1::server_reflection_client::ServerReflectionClient::new(app.channel().await);
    let request = reflection_v1::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(
            reflection_v1::server_reflection_request::MessageRequest::ListServices(String::new()),
        ),
    };
    let mut answers = v1
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .unwrap()
        .into_inner();
    let Some(reflection_v1::server_reflection_response::MessageResponse::ListServicesResponse(
        list,
    )) = answers.message().await.unwrap().unwrap().message_response
    else {
        panic!("a service list");
    };
    let mut names: Vec<_> = list.service.into_iter().map(|s| s.name).collect();
    names.sort();
    assert_eq!(names, expected);

    let mut v1alpha = reflection_v1alpha::server_reflection_client::ServerReflectionClient::new(
        app.channel().await,
    );
    let request = reflection_v1alpha::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(
            reflection_v1alpha::server_reflection_request::MessageRequest::ListServices(
                String::new(),
            ),
        ),
    };
    let mut answers = v1alpha
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .unwrap()
        .into_inner();
    let Some(
        reflection_v1alpha::server_reflection_response::MessageResponse::ListServicesResponse(list),
    ) = answers.message().await.unwrap().unwrap().message_response
    else {
        panic!("a service list");
    };
    let mut names: Vec<_> = list.service.into_iter().map(|s| s.name).collect();
    names.sort();
    assert_eq!(names, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tokens_authenticate_and_scope_keys_per_client() {
    let db = TestDb::new();
    let tokens = Tokens::parse(
        &(token_line("shop", "shop-secret") + &token_line("billing", "billing-secret")),
    )
    .unwrap();
    let app = TestApp::spawn_with(
        &db,
        Config {
            auth: Some(tokens),
            ..Config::default()
        },
    )
    .await;
    let channel = app.channel().await;
    let mut shop = with_token(channel.clone(), "shop-secret");
    let mut billing = with_token(channel.clone(), "billing-secret");

    let open = pb::OpenAccountRequest {
        idempotency_key: "acct".into(),
        currency: "USD".into(),
        ..Default::default()
    };
    let account = shop
        .open_account(open)
        .await
        .unwrap()
        .into_inner()
        .account
        .unwrap()
        .account_id;
    let fund = pb::CreditRequest {
        idempotency_key: "fund".into(),
        account_id: account,
        amount: 100,
        currency: "USD".into(),
        description: String::new(),
        ..Default::default()
    };
    shop.credit(fund).await.unwrap();

    for (client, why) in [(LedgerClient::new(channel.clone()), "no token")] {
        let mut client = client;
        let status = client.charge(charge("k", account, 10)).await.unwrap_err();
        assert_eq!(status.code(), Code::Unauthenticated, "{why}");
        assert_eq!(
            status.get_details_error_info().unwrap().reason,
            "UNAUTHENTICATED"
        );
    }
    let wrong = with_token(channel.clone(), "guess")
        .charge(charge("k", account, 10))
        .await
        .unwrap_err();
    assert_eq!(wrong.code(), Code::Unauthenticated);
    assert_eq!(db.key_rows("k").await, 0, "refused calls leave no trace");

    // The same key from two clients is two operations.
    let shop_first = shop
        .charge(charge("k", account, 10))
        .await
        .unwrap()
        .into_inner();
    let billing_first = billing.charge(charge("k", account, 10)).await.unwrap();
    assert!(
        !replayed(billing_first.metadata()),
        "billing's k is not shop's k"
    );
    let billing_first = billing_first.into_inner();
    assert_ne!(
        billing_first.entry.as_ref().unwrap().entry_id,
        shop_first.entry.as_ref().unwrap().entry_id
    );
    assert_eq!(db.balance(account).await, 80);

    // Each client replays its own reply, never the other's.
    let shop_again = shop.charge(charge("k", account, 10)).await.unwrap();
    assert!(replayed(shop_again.metadata()));
    assert_eq!(shop_again.into_inner(), shop_first);
    let billing_again = billing.charge(charge("k", account, 10)).await.unwrap();
    assert_eq!(billing_again.into_inner(), billing_first);
    assert_eq!(db.balance(account).await, 80);
    assert_eq!(db.key_rows("k").await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_serves_clients_that_trust_the_certificate() {
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let cert_pem = certified.cert.pem();
    let identity = TlsIdentity::from_pem(
        cert_pem.clone().into_bytes(),
        certified.signing_key.serialize_pem().into_bytes(),
    )
    .unwrap();
    let db = TestDb::new();
    let app = TestApp::spawn_with(
        &db,
        Config {
            tls: Some(identity),
            ..Config::default()
        },
    )
    .await;

    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&cert_pem))
        .domain_name("localhost");
    let channel = Channel::from_shared(format!("https://{}", app.addr))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .unwrap();
    let open = pb::OpenAccountRequest {
        idempotency_key: "tls".into(),
        currency: "USD".into(),
        ..Default::default()
    };
    LedgerClient::new(channel)
        .open_account(open.clone())
        .await
        .unwrap();

    let plaintext = Channel::from_shared(format!("http://{}", app.addr))
        .unwrap()
        .connect()
        .await;
    let refused = match plaintext {
        Err(_) => true,
        Ok(channel) => LedgerClient::new(channel).open_account(open).await.is_err(),
    };
    assert!(refused, "a plaintext client gets nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_requests_are_refused_before_any_work() {
    let db = TestDb::new();
    let app = TestApp::spawn_with(
        &db,
        Config {
            max_message_bytes: Some(4096),
            ..Config::default()
        },
    )
    .await;
    let account = app.funded_account("USD", 100).await;
    let big = pb::ChargeRequest {
        description: "x".repeat(5000),
        ..charge("big", account, 1)
    };
    let status = app.client().await.charge(big).await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert_eq!(
        status.get_details_error_info().unwrap().reason,
        "MESSAGE_TOO_LARGE"
    );
    assert_eq!(db.key_rows("big").await, 0);
}
