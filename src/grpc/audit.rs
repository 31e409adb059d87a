//! `ledger audit`'s judgement of each stored outcome, which takes the wire format:
//! a success must decode as its method's reply and name exactly the entries (and
//! the hold) its key wrote; a decline must decode as a `google.rpc.Status` with
//! the stored code and an `ErrorInfo` of this domain.

use prost::Message;

use crate::db::admin::audit::{EntryFacts, StoredKey};
use crate::ledger::Method;
use crate::proto::pb;

/// `None` when the stored outcome is sound.
pub fn judge(key: &StoredKey) -> Option<String> {
    let (Some(code), Some(body)) = (key.outcome_code, key.outcome.as_deref()) else {
        return None; // reported by the set check "every key has an outcome"
    };
    let problem = match Method::from_code(key.method) {
        None => Some(format!("unknown method {}", key.method)),
        Some(method) if code == 0 => judge_reply(method, key, body).err(),
        Some(_) => judge_decline(code, body),
    };
    problem.map(|p| {
        format!(
            "key {:?} (namespace {:?}): {p}",
            String::from_utf8_lossy(&key.idempotency_key),
            String::from_utf8_lossy(&key.namespace)
        )
    })
}

/// What a reply names.
#[derive(Default)]
struct Named {
    entries: Vec<pb::Entry>,
    hold: Option<pb::Hold>,
}

fn decode<M: Message + Default>(body: &[u8]) -> Result<M, String> {
    M::decode(body).map_err(|e| format!("the stored reply does not decode: {e}"))
}

fn judge_reply(method: Method, key: &StoredKey, body: &[u8]) -> Result<(), String> {
    let missing = || "the stored reply lacks a field".to_owned();
    let named = match method {
        Method::OpenAccount => {
            let account = decode::<pb::OpenAccountReply>(body)?
                .account
                .ok_or_else(missing)?;
            if account.account_id == 0 {
                return Err("the stored reply opens account 0".into());
            }
            Named::default()
        }
        Method::Credit => entries([decode::<pb::CreditReply>(body)?.entry]),
        Method::Charge => entries([decode::<pb::ChargeReply>(body)?.entry]),
        Method::Refund => entries([decode::<pb::RefundReply>(body)?.entry]),
        Method::Transfer => {
            let reply = decode::<pb::TransferReply>(body)?;
            entries([reply.debit, reply.credit])
        }
        Method::PlaceHold => Named {
            hold: decode::<pb::PlaceHoldReply>(body)?.hold,
            ..Named::default()
        },
        Method::CaptureHold => {
            let reply = decode::<pb::CaptureHoldReply>(body)?;
            Named {
                hold: Some(reply.hold.ok_or_else(missing)?),
                ..entries([reply.entry])
            }
        }
        Method::VoidHold => Named {
            hold: Some(
                decode::<pb::VoidHoldReply>(body)?
                    .hold
                    .ok_or_else(missing)?,
            ),
            ..Named::default()
        },
    };
    if named.entries.iter().any(|e| e.entry_id == 0) {
        return Err(missing());
    }
    let replied: Vec<EntryFacts> = named
        .entries
        .iter()
        .map(|e| EntryFacts {
            entry_id: e.entry_id,
            account_id: e.account_id,
            kind: u8::try_from(e.kind).unwrap_or(0),
            amount: e.amount,
            balance_after: e.balance_after,
        })
        .collect();
    if replied != key.entries {
        return Err(format!(
            "the stored reply names entries {replied:?}, its key wrote {:?}",
            key.entries
        ));
    }
    if named
        .entries
        .iter()
        .any(|e| e.idempotency_key.as_bytes() != key.idempotency_key)
    {
        return Err("an entry of the stored reply names another key".into());
    }
    if method == Method::PlaceHold {
        let hold = named.hold.ok_or_else(missing)?;
        if Some((hold.hold_id, hold.amount)) != key.hold {
            return Err(format!(
                "the stored reply places hold {}, its key placed {:?}",
                hold.hold_id, key.hold
            ));
        }
    }
    Ok(())
}

fn entries<const N: usize>(entries: [Option<pb::Entry>; N]) -> Named {
    Named {
        // A missing entry is reported as a mismatch with what the key wrote.
        entries: entries.into_iter().map(Option::unwrap_or_default).collect(),
        hold: None,
    }
}

fn judge_decline(code: i32, body: &[u8]) -> Option<String> {
    use tonic_types::RpcStatusExt as _;
    let status = match tonic_types::pb::Status::decode(body) {
        Ok(status) => status,
        Err(e) => return Some(format!("the stored status does not decode: {e}")),
    };
    if status.code != code {
        return Some(format!(
            "the stored status has code {}, its row {code}",
            status.code
        ));
    }
    match status.get_error_details().error_info() {
        Some(info) if info.domain == super::DOMAIN => None,
        _ => Some("the stored status has no ErrorInfo of the ledger.v1 domain".into()),
    }
}
