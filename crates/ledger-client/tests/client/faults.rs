//! Many charges through a proxy that breaks a share of the connections between
//! client and service: the reply lost (the connection cut once the service sent
//! it), the reply held past the attempt's deadline, reset before the request
//! arrives (one fault per connection, drawn from a seeded random). Every charge takes effect exactly
//! once, and every call ends with the reply stored under its key.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use ledger_client::{Backoff, Budget, Client, pb};
use rand::{RngExt as _, SeedableRng as _};

use crate::support::{Fault, FaultProxy, TestApp, TestDb, assert_each_key_charged_once};

const CHARGES: usize = 1_000;
const CALLERS: usize = 8;
const SEED: u64 = 26;
const ATTEMPT: Duration = Duration::from_millis(400);

fn fault(rng: &mut rand::rngs::StdRng) -> Fault {
    match rng.random_range(0..100) {
        // 20% replies lost with their connection, 10% replies held past the
        // attempt's deadline, 5% reset before the request arrives.
        0..20 => Fault::CutAfterRequest,
        20..30 => Fault::DelayReply(ATTEMPT + Duration::from_millis(300)),
        30..35 => Fault::ResetBeforeRequest,
        _ => Fault::Pass,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_charge_takes_effect_once_through_a_faulty_network() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let start = 1_000_000;
    let account = app.funded_account("USD", start).await;
    let mut rng = rand::rngs::StdRng::seed_from_u64(SEED);
    let proxy = FaultProxy::start(app.addr, move |_| fault(&mut rng)).await;
    let budget = Budget {
        timeout: Duration::from_secs(30),
        attempt_timeout: ATTEMPT,
        lookup_reserve: Duration::from_secs(2),
        backoff: Backoff {
            initial: Duration::from_millis(10),
            max: Duration::from_millis(200),
            multiplier: 2.0,
        },
    };

    // Each caller has a client (a connection) of its own, so a fault hits the
    // calls of one caller.
    let callers = (0..CALLERS).map(|caller| {
        let client = Client::builder()
            .endpoint(proxy.url())
            .budget(budget)
            .build()
            .unwrap();
        tokio::spawn(async move {
            let mut answers = Vec::new();
            for i in (caller..CHARGES).step_by(CALLERS) {
                let key = format!("storm-{i}");
                let amount = i64::try_from(i % 9 + 1).unwrap();
                let request = pb::ChargeRequest {
                    idempotency_key: key.clone(),
                    account_id: account,
                    amount,
                    currency: "USD".into(),
                    description: String::new(),
                    ..Default::default()
                };
                let answer = client.charge(request).await;
                answers.push((key, amount, answer));
            }
            answers
        })
    });
    let mut answers = Vec::new();
    for caller in callers.collect::<Vec<_>>() {
        answers.extend(caller.await.unwrap());
    }

    let direct = app.client();
    let mut charged = BTreeMap::new();
    let (mut replays, mut retried, mut attempts) = (0, 0, 0);
    for (key, amount, answer) in answers {
        let answer = answer.unwrap_or_else(|e| panic!("{key}: {e}"));
        replays += u32::from(answer.replayed);
        retried += u32::from(answer.attempts > 1);
        attempts += answer.attempts;
        let record = direct
            .lookup_key(pb::LookupKeyRequest {
                idempotency_key: key.clone(),
            })
            .await
            .unwrap()
            .reply;
        assert_eq!(
            record.outcome,
            Some(pb::key_record::Outcome::Reply(
                prost::Message::encode_to_vec(&answer.reply)
            )),
            "{key}: the call ended with the stored reply"
        );
        charged.insert(key, amount);
    }
    assert_each_key_charged_once(&db, account, start, &charged).await;

    let counts = proxy.counts();
    let (cuts, delays, resets) = (
        counts.cuts.load(Ordering::Relaxed),
        counts.delays.load(Ordering::Relaxed),
        counts.resets.load(Ordering::Relaxed),
    );
    eprintln!(
        "{CHARGES} charges, {attempts} attempts, {retried} retried, {replays} replays; \
         {} connections: {cuts} replies lost, {delays} replies delayed, {resets} reset",
        counts.connections.load(Ordering::Relaxed)
    );
    assert!(cuts > 0 && delays > 0 && resets > 0, "every fault was met");
    assert!(replays > 0, "some retries found their charge done");
}
