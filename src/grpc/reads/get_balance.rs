//! GetBalance (SPEC 3.10): an account's balance and the limits in force as it
//! stood after its last entry up to a sequence or a time (neither: now), exact
//! and repeatable.

use super::reader::{Read, Reader};
use crate::call::Call;
use crate::error::Error;
use crate::grpc::auth::Client;
use crate::ledger::{AccountId, BalancePoint, FieldViolation};
use crate::ops::{Violations, limits_message, timestamp};
use crate::proto::pb;

#[derive(Debug)]
pub struct GetBalance;

impl Read for GetBalance {
    type Request = pb::GetBalanceRequest;
    type Reply = pb::Balance;

    async fn answer(
        reader: &Reader,
        request: pb::GetBalanceRequest,
        _: &Client,
        call: &Call,
    ) -> Result<pb::Balance, Error> {
        let (account, point) = parse(&request)?;
        let balance = reader.db().get_balance(call, account, point).await?;
        Ok(pb::Balance {
            account_id: balance.account_id.get(),
            currency: balance.currency.as_str().to_owned(),
            balance: balance.balance,
            limits: Some(limits_message(balance.limits)),
            sequence: balance.after.map_or(0, |(sequence, _)| sequence),
            created_at: balance.after.map(|(_, at)| timestamp(at)),
        })
    }
}

/// The request: an account, and at most one point: a sequence (0: not given) or
/// a time, floored to the microsecond; neither is now.
fn parse(r: &pb::GetBalanceRequest) -> Result<(AccountId, BalancePoint), Error> {
    let mut check = Violations::default();
    let account = check.field(AccountId::parse("account_id", r.account_id));
    let point = match (r.as_of_sequence, r.as_of_time) {
        (0, None) => Some(BalancePoint::Now),
        (n, None) => Some(BalancePoint::Sequence(n)),
        (0, Some(t)) => {
            let at = u32::try_from(t.nanos)
                .ok()
                .and_then(|nanos| chrono::DateTime::from_timestamp(t.seconds, nanos))
                .filter(|_| t.nanos < 1_000_000_000);
            if let Some(at) = at {
                let micro = chrono::TimeDelta::microseconds(1);
                let floored = chrono::DurationRound::duration_trunc(at, micro).unwrap_or(at);
                Some(BalancePoint::Time(floored))
            } else {
                check.push(FieldViolation::new(
                    "as_of_time",
                    "must be a valid timestamp (nanos 0 to 999,999,999)",
                ));
                None
            }
        }
        (_, Some(_)) => {
            check.push(FieldViolation::new(
                "as_of_time",
                "give as_of_sequence or as_of_time, not both",
            ));
            None
        }
    };
    match (account, point) {
        (Some(account), Some(point)) => Ok((account, point)),
        _ => Err(Error::InvalidRequest(check.into_violations())),
    }
}
