//! Which fields are money, and in which currency: the one rule the flags and
//! the output follow, read from the descriptor.
//!
//! The contract writes every amount of money as an `int64` of minor units, and
//! nothing else as an `int64` (ids and sequences are unsigned, counts 32-bit; a
//! unit test holds the contract to it). An amount is of the currency its
//! message names in a `currency` field, or, for a message without one (an
//! `AccountLimits`), of the message that holds it; a request with amounts but
//! no currency (Refund, CaptureHold, SetLimits) gets a `--currency` of
//! ledgerctl's own, which is not sent.
//!
//! People read and write an amount in its currency's units (`10.00 USD`), by
//! `ledger_proto::money`; `--<field>-minor` and `-o json` keep the wire's minor
//! units.

use ledger_client::money;
use prost_reflect::{DynamicMessage, FieldDescriptor, Kind, MessageDescriptor};

/// The field that names a message's currency.
pub(crate) const CURRENCY: &str = "currency";

/// Whether `field` is an amount of money, in minor units.
pub(crate) fn is_money(field: &FieldDescriptor) -> bool {
    matches!(field.kind(), Kind::Int64 | Kind::Sint64 | Kind::Sfixed64)
        && !field.is_list()
        && !field.is_map()
}

/// Whether `message` names the currency of its amounts.
pub(crate) fn names_currency(message: &MessageDescriptor) -> bool {
    message
        .get_field_by_name(CURRENCY)
        .is_some_and(|field| field.kind() == Kind::String && !field.is_list())
}

/// The currency `message` names, or `outer` (the currency of the message
/// that holds it) where it names none.
pub(crate) fn currency_of(message: &DynamicMessage, outer: Option<&str>) -> Option<String> {
    message
        .get_field_by_name(CURRENCY)
        .and_then(|value| value.as_str().map(str::to_owned))
        .filter(|currency| !currency.is_empty())
        .or_else(|| outer.map(str::to_owned))
}

/// `minor` units as people read them: `10.00 USD`; in minor units, marked,
/// where the currency is unknown or has no decimals.
pub(crate) fn format(minor: i64, currency: Option<&str>) -> String {
    money::format(minor, currency.unwrap_or_default())
}

/// `--<flag> TEXT` of `currency` in minor units. The decimals must be exactly
/// the currency's: `10` of USD is refused rather than read as 10.00, since
/// the same flag once took minor units and `--amount 1000` must not move a
/// hundred times what it used to.
pub(crate) fn parse(flag: &str, text: &str, currency: Option<&str>) -> Result<i64, String> {
    let Some(currency) = currency.filter(|currency| !currency.is_empty()) else {
        return Err(format!(
            "--{flag} {text}: the currency is not known, so neither are its decimals: \
             give --{CURRENCY}, or the amount in minor units with --{flag}-minor"
        ));
    };
    let Some(exponent) = money::exponent(currency) else {
        return Err(format!(
            "--{flag} {text}: {currency} has no decimals known (ISO 4217 gives it no \
             exponent): give the amount in minor units with --{flag}-minor"
        ));
    };
    let decimals = text
        .trim()
        .split_once('.')
        .map_or(0, |(_, fraction)| fraction.len());
    let places = usize::try_from(exponent).unwrap_or(usize::MAX);
    if decimals != places {
        let example = if places == 0 {
            "1000".to_owned()
        } else {
            format!("10.{}", "0".repeat(places))
        };
        return Err(format!(
            "--{flag} {text}: {currency} is written with exactly {exponent} decimals \
             (its ISO 4217 exponent), e.g. {example}; or give minor units with --{flag}-minor"
        ));
    }
    money::parse(text, currency).map_err(|e| format!("--{flag}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::pool;

    #[test]
    fn every_int64_of_the_contract_is_an_amount_of_money() {
        let mut amounts: Vec<String> = pool()
            .all_messages()
            .filter(|message| message.package_name() == "ledger.v1")
            .flat_map(|message| message.fields().collect::<Vec<_>>())
            .filter(is_money)
            .map(|field| field.name().to_owned())
            .collect();
        amounts.sort();
        amounts.dedup();
        assert_eq!(
            amounts,
            [
                "amount",
                "available",
                "balance",
                "balance_after",
                "captured_amount",
                "held",
                "max_balance",
                "min_balance"
            ],
            "an int64 that is not money needs a rule of its own here"
        );
    }

    #[test]
    fn an_amount_takes_exactly_its_currencys_decimals() {
        assert_eq!(parse("amount", "10.00", Some("USD")), Ok(1000));
        assert_eq!(parse("amount", "-0.05", Some("USD")), Ok(-5));
        assert_eq!(parse("amount", "1000", Some("JPY")), Ok(1000));
        assert_eq!(parse("amount", "1.000", Some("KWD")), Ok(1000));
        assert_eq!(
            parse("amount", "92233720368547758.07", Some("USD")),
            Ok(i64::MAX)
        );
        assert_eq!(
            parse("amount", "-9223372036854775808", Some("JPY")),
            Ok(i64::MIN)
        );
    }

    #[test]
    fn other_decimals_name_the_currencys_exponent() {
        let refused =
            |text: &str, currency: &str| parse("amount", text, Some(currency)).unwrap_err();
        assert_eq!(
            refused("10", "USD"),
            "--amount 10: USD is written with exactly 2 decimals (its ISO 4217 exponent), \
             e.g. 10.00; or give minor units with --amount-minor"
        );
        assert!(refused("10.5", "USD").contains("exactly 2 decimals"));
        assert!(refused("1.00", "KWD").contains("exactly 3 decimals"));
        assert!(refused("1000.0", "JPY").contains("exactly 0 decimals"));
        assert!(refused("1000.0", "JPY").contains("e.g. 1000;"));
        assert!(refused("ten.00", "USD").contains("is not an amount"));
        assert!(refused("92233720368547758.08", "USD").contains("more than an amount holds"));
    }

    #[test]
    fn without_a_known_currency_an_amount_is_given_in_minor_units() {
        let unknown = parse("amount", "10.00", Some("ABC")).unwrap_err();
        assert!(unknown.contains("ABC has no decimals known"), "{unknown}");
        assert!(unknown.contains("--amount-minor"), "{unknown}");
        for currency in [None, Some("")] {
            let missing = parse("min-balance", "-50.00", currency).unwrap_err();
            assert!(missing.contains("give --currency"), "{missing}");
            assert!(missing.contains("--min-balance-minor"), "{missing}");
        }
    }

    #[test]
    fn amounts_read_in_their_currencys_units() {
        assert_eq!(format(1000, Some("USD")), "10.00 USD");
        assert_eq!(format(1000, Some("JPY")), "1000 JPY");
        assert_eq!(format(1000, Some("KWD")), "1.000 KWD");
        assert_eq!(format(i64::MIN, Some("USD")), "-92233720368547758.08 USD");
        assert_eq!(format(7, Some("ABC")), "7 ABC (minor units)");
        assert_eq!(format(7, None), "7 (minor units)");
    }
}
