//! Amounts as people read and write them: the API's minor units (`1000` of USD)
//! in the currency's own units (`10.00 USD`), and back.
//!
//! A currency's decimals are its ISO 4217 exponent, from the `iso_currency`
//! crate's table (JPY 0, USD 2, KWD 3). The ledger takes any three upper-case
//! letters as a currency, so a code that table does not know (`ABC`), or one
//! ISO gives no minor unit (`XAU`, `XXX`: its exponent is "N.A."), has no
//! decimals anyone could read it in: it is shown in minor units, and says so.
//!
//! All integer arithmetic: every `i64` reads back exactly, `i64::MIN` and
//! `i64::MAX` included.

use std::fmt;

use iso_currency::Currency;

/// How many decimals `currency`'s amounts are read in; `None` when ISO 4217
/// gives it none (a code it does not know, or one without a minor unit), or
/// more than an `i64` could scale.
pub fn exponent(currency: &str) -> Option<u32> {
    let exponent = u32::from(Currency::from_code(currency)?.exponent()?);
    10_u64.checked_pow(exponent).map(|_| exponent)
}

/// `minor` units of `currency` as people read them: `10.00 USD`, `1000 JPY`,
/// `1.000 KWD`, `-0.05 USD`; in minor units, marked, where the currency has no
/// decimals to read it in: `1000 ABC (minor units)`.
pub fn format(minor: i64, currency: &str) -> String {
    let Some(exponent) = exponent(currency) else {
        return if currency.is_empty() {
            format!("{minor} (minor units)")
        } else {
            format!("{minor} {currency} (minor units)")
        };
    };
    let sign = if minor < 0 { "-" } else { "" };
    // `unsigned_abs` holds `i64::MIN`'s magnitude, which no `i64` does.
    let magnitude = minor.unsigned_abs();
    if exponent == 0 {
        return format!("{sign}{magnitude} {currency}");
    }
    let scale = 10_u64.pow(exponent);
    let (whole, fraction) = (magnitude / scale, magnitude % scale);
    let width = usize::try_from(exponent).unwrap_or(0);
    format!("{sign}{whole}.{fraction:0width$} {currency}")
}

/// Why a text is not an amount of a currency.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// Nothing was given.
    Empty,
    /// A character that is not part of an amount: digits, a leading `-`, one `.`.
    NotANumber { text: String },
    /// Decimals the currency is not written with.
    Decimals {
        text: String,
        currency: String,
        /// The currency's decimals; `None` when it has none it could be read in
        /// (the amount is then given in minor units).
        takes: Option<u32>,
    },
    /// More than an amount holds (an `i64` of minor units).
    OutOfRange { text: String, currency: String },
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("no amount given"),
            Self::NotANumber { text } => write!(
                f,
                "{text:?} is not an amount: digits, with a leading - if negative and a . \
                 before the decimals"
            ),
            Self::Decimals {
                text,
                currency,
                takes: Some(0),
            } => write!(f, "{text:?}: {currency} takes no decimals, e.g. 1000"),
            Self::Decimals {
                text,
                currency,
                takes: Some(n),
            } => write!(
                f,
                "{text:?}: {currency} takes {n} decimals, or none (e.g. 10.{} or 10)",
                "0".repeat(usize::try_from(*n).unwrap_or(0))
            ),
            Self::Decimals {
                text,
                currency,
                takes: None,
            } => write!(
                f,
                "{text:?}: {currency} has no decimals known (ISO 4217 gives it no minor \
                 unit); give the amount in minor units, a whole number"
            ),
            Self::OutOfRange { text, currency } => write!(
                f,
                "{text:?} is more than an amount holds: from {} to {}",
                format(i64::MIN, currency),
                format(i64::MAX, currency)
            ),
        }
    }
}

impl std::error::Error for ParseError {}

/// An amount of `currency` as people write it, in minor units: `10.00` or `10`
/// of USD is `1000`, `1000` of JPY is `1000`, `-0.05` of USD is `-5`. The
/// decimals are exactly the currency's, or none; a currency without decimals
/// (`ABC`, `XAU`) takes a whole number of minor units.
pub fn parse(text: &str, currency: &str) -> Result<i64, ParseError> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(ParseError::Empty);
    }
    let (negative, unsigned) = match trimmed.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, trimmed),
    };
    let (whole, fraction) = match unsigned.split_once('.') {
        Some((whole, fraction)) => (whole, Some(fraction)),
        None => (unsigned, None),
    };
    let digits = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || fraction.is_some_and(|f| !digits(f)) {
        return Err(ParseError::NotANumber {
            text: trimmed.to_owned(),
        });
    }
    let takes = exponent(currency);
    let decimals = fraction.map_or(0, str::len);
    if fraction.is_some() && takes.is_none_or(|n| n as usize != decimals) {
        return Err(ParseError::Decimals {
            text: trimmed.to_owned(),
            currency: currency.to_owned(),
            takes,
        });
    }
    let out_of_range = || ParseError::OutOfRange {
        text: trimmed.to_owned(),
        currency: currency.to_owned(),
    };
    let scale = 10_u64.pow(takes.unwrap_or(0));
    let magnitude = whole
        .parse::<u64>()
        .ok()
        .and_then(|w| w.checked_mul(scale))
        .and_then(|w| w.checked_add(fraction.map_or(Some(0), |f| f.parse().ok())?))
        .ok_or_else(out_of_range)?;
    if negative {
        0_i64.checked_sub_unsigned(magnitude)
    } else {
        i64::try_from(magnitude).ok()
    }
    .ok_or_else(out_of_range)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exponents_are_iso_4217s() {
        for (currency, decimals) in [
            ("JPY", Some(0)),
            ("USD", Some(2)),
            ("EUR", Some(2)),
            ("KWD", Some(3)),
            ("BHD", Some(3)),
            ("CLF", Some(4)),
            ("XAU", None),
            ("XXX", None),
            ("ABC", None),
            ("usd", None),
            ("", None),
        ] {
            assert_eq!(exponent(currency), decimals, "{currency}");
        }
    }

    #[test]
    fn amounts_read_in_their_currencys_units() {
        for (minor, currency, shown) in [
            (1000, "USD", "10.00 USD"),
            (1000, "JPY", "1000 JPY"),
            (1000, "KWD", "1.000 KWD"),
            (1000, "BHD", "1.000 BHD"),
            (-5, "USD", "-0.05 USD"),
            (-1000, "JPY", "-1000 JPY"),
            (0, "USD", "0.00 USD"),
            (0, "JPY", "0 JPY"),
            (7, "KWD", "0.007 KWD"),
            (-123_456, "KWD", "-123.456 KWD"),
        ] {
            assert_eq!(format(minor, currency), shown, "{minor} {currency}");
        }
    }

    #[test]
    fn the_extremes_are_exact() {
        assert_eq!(format(i64::MAX, "USD"), "92233720368547758.07 USD");
        assert_eq!(format(i64::MIN, "USD"), "-92233720368547758.08 USD");
        assert_eq!(format(i64::MIN, "JPY"), "-9223372036854775808 JPY");
        assert_eq!(format(i64::MAX, "KWD"), "9223372036854775.807 KWD");
        for currency in ["USD", "JPY", "KWD", "ABC"] {
            for minor in [i64::MIN, i64::MIN + 1, -1, 0, 1, i64::MAX - 1, i64::MAX] {
                let shown = format(minor, currency);
                let number = shown.split(' ').next().unwrap();
                assert_eq!(parse(number, currency), Ok(minor), "{shown}");
            }
        }
    }

    #[test]
    fn a_currency_without_decimals_shows_its_minor_units_marked() {
        assert_eq!(format(1000, "ABC"), "1000 ABC (minor units)");
        assert_eq!(format(-3, "XAU"), "-3 XAU (minor units)");
        assert_eq!(format(5, "XXX"), "5 XXX (minor units)");
        assert_eq!(format(5, ""), "5 (minor units)");
        assert_eq!(parse("1000", "ABC"), Ok(1000));
    }

    #[test]
    fn amounts_are_written_with_the_currencys_decimals_or_none() {
        for (text, currency, minor) in [
            ("10.00", "USD", 1000),
            ("10", "USD", 1000),
            ("-0.05", "USD", -5),
            (" 0.10 ", "USD", 10),
            ("007.50", "USD", 750),
            ("1000", "JPY", 1000),
            ("1.000", "KWD", 1000),
            ("-0", "USD", 0),
        ] {
            assert_eq!(parse(text, currency), Ok(minor), "{text} {currency}");
        }
    }

    #[test]
    fn other_decimals_are_refused_saying_what_the_currency_takes() {
        let decimals = |text: &str, currency: &str| parse(text, currency).unwrap_err().to_string();
        assert_eq!(
            decimals("10.5", "USD"),
            "\"10.5\": USD takes 2 decimals, or none (e.g. 10.00 or 10)"
        );
        assert_eq!(
            decimals("10.000", "USD"),
            "\"10.000\": USD takes 2 decimals, or none (e.g. 10.00 or 10)"
        );
        assert_eq!(
            decimals("1.00", "KWD"),
            "\"1.00\": KWD takes 3 decimals, or none (e.g. 10.000 or 10)"
        );
        assert_eq!(
            decimals("10.0", "JPY"),
            "\"10.0\": JPY takes no decimals, e.g. 1000"
        );
        assert!(decimals("1.5", "ABC").contains("give the amount in minor units"));
        assert!(decimals("1.5", "XAU").contains("no minor unit"));
    }

    #[test]
    fn what_is_no_number_or_too_large_is_refused() {
        assert_eq!(parse("", "USD"), Err(ParseError::Empty));
        assert_eq!(parse("  ", "USD"), Err(ParseError::Empty));
        for text in [
            "ten", "1,000.00", "+5", "--5", "1.", ".50", "1.2.3", "1e3", "10 USD", "-", "٣",
        ] {
            assert!(
                matches!(parse(text, "USD"), Err(ParseError::NotANumber { .. })),
                "{text}"
            );
        }
        for (text, currency) in [
            ("92233720368547758.08", "USD"),
            ("-92233720368547758.09", "USD"),
            ("9223372036854775808", "JPY"),
            ("99999999999999999999999", "JPY"),
            ("100000000000000000", "USD"),
        ] {
            let refused = parse(text, currency).unwrap_err();
            assert!(
                matches!(refused, ParseError::OutOfRange { .. }),
                "{text}: {refused}"
            );
        }
        assert_eq!(
            parse("100000000000000000", "USD").unwrap_err().to_string(),
            "\"100000000000000000\" is more than an amount holds: from \
             -92233720368547758.08 USD to 92233720368547758.07 USD"
        );
    }
}
