//! Metadata (SPEC 3.11): the business tags a caller puts on what a call writes
//! (`order_id`, `invoice`, `customer`), to find it again by them.
//!
//! A call's metadata is stored once for the call, under its key, and shown by
//! everything the call wrote: its entries, its hold, its account. It never
//! changes. Keys and values are compared byte for byte everywhere: stored as
//! binary, so no collation folds case or pads spaces.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::fingerprint::Fields;
use super::values::FieldViolation;

/// The most pairs a call carries.
pub const MAX_PAIRS: usize = 50;
/// The longest key, in characters (all ASCII).
pub const MAX_KEY_LEN: usize = 40;
/// The longest value, in Unicode scalar values.
pub const MAX_VALUE_CHARS: usize = 500;

/// A call's validated pairs, in key order: at most [`MAX_PAIRS`], each key 1 to
/// [`MAX_KEY_LEN`] characters of `[A-Za-z0-9_.-]`, each value at most
/// [`MAX_VALUE_CHARS`] characters. Shared, since a post's every entry shows it;
/// none is no allocation, as most rows a transaction reads have none.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Metadata(Option<Arc<BTreeMap<String, String>>>);

/// What [`Metadata::none`] borrows.
static NONE: Metadata = Metadata::NONE;

impl Metadata {
    /// No pairs.
    pub const NONE: Self = Self(None);

    /// No pairs, borrowed for as long as needed.
    pub fn none() -> &'static Self {
        &NONE
    }
}

impl Metadata {
    /// The pairs of request field `field` (`metadata`), with every violation,
    /// each naming the field and describing the key at fault.
    pub fn parse(
        field: &'static str,
        raw: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, Vec<FieldViolation>> {
        let pairs: BTreeMap<String, String> = raw.into_iter().collect();
        let mut violations = Vec::new();
        if pairs.len() > MAX_PAIRS {
            violations.push(FieldViolation::new(
                field,
                format!("must hold at most {MAX_PAIRS} pairs, not {}", pairs.len()),
            ));
        }
        for (key, value) in &pairs {
            if let Err(why) = check_key(key) {
                violations.push(FieldViolation::new(field, format!("key {key:?} {why}")));
            }
            let chars = value.chars().count();
            if chars > MAX_VALUE_CHARS {
                violations.push(FieldViolation::new(
                    field,
                    format!(
                        "value of key {key:?} must be at most {MAX_VALUE_CHARS} characters, \
                         not {chars}"
                    ),
                ));
            }
        }
        if violations.is_empty() {
            Ok(Self::stored(pairs))
        } else {
            Err(violations)
        }
    }

    /// Pairs as stored, trusted (they were valid when written).
    pub fn stored(pairs: impl IntoIterator<Item = (String, String)>) -> Self {
        let pairs: BTreeMap<String, String> = pairs.into_iter().collect();
        Self((!pairs.is_empty()).then(|| Arc::new(pairs)))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    pub fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |pairs| pairs.len())
    }

    /// The pairs, in key order.
    pub fn pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0
            .iter()
            .flat_map(|pairs| pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    }

    /// Feeds the pairs to a fingerprint as a set (in key order, whatever their
    /// order on the wire): nothing when there are none, so a request made
    /// before metadata existed keeps its fingerprint.
    pub fn fingerprint(&self, fields: &mut Fields) {
        if self.is_empty() {
            return;
        }
        fields.str("metadata");
        fields.u64(self.len() as u64);
        for (key, value) in self.pairs() {
            fields.str(key);
            fields.str(value);
        }
    }
}

impl Metadata {
    /// The pairs as one stored value, in key order: each key and each value as
    /// a 4-byte big-endian length and its UTF-8.
    pub fn encode(&self) -> Vec<u8> {
        let mut bytes = Vec::new();
        for (key, value) in self.pairs() {
            for part in [key, value] {
                // Bounded far below 4 GiB by validation.
                let len = u32::try_from(part.len()).unwrap_or(u32::MAX);
                bytes.extend_from_slice(&len.to_be_bytes());
                bytes.extend_from_slice(part.as_bytes());
            }
        }
        bytes
    }

    /// The pairs of a stored value ([`Metadata::encode`]); `None` if it is not
    /// one.
    pub fn decode(mut bytes: &[u8]) -> Option<Self> {
        fn part(bytes: &mut &[u8]) -> Option<String> {
            let (len, rest) = bytes.split_first_chunk::<4>()?;
            let len = usize::try_from(u32::from_be_bytes(*len)).ok()?;
            let (text, rest) = rest.split_at_checked(len)?;
            *bytes = rest;
            String::from_utf8(text.to_vec()).ok()
        }
        let mut pairs = Vec::new();
        while !bytes.is_empty() {
            let key = part(&mut bytes)?;
            let value = part(&mut bytes)?;
            pairs.push((key, value));
        }
        Some(Self::stored(pairs))
    }
}

/// Why `key` is not a metadata key.
pub fn check_key(key: &str) -> Result<(), String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-');
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        return Err(format!(
            "must be 1 to {MAX_KEY_LEN} characters, not {}",
            key.chars().count()
        ));
    }
    if !key.chars().all(allowed) {
        return Err("may hold only the characters A-Z a-z 0-9 _ . -".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::Fingerprint;

    fn parse(pairs: &[(&str, &str)]) -> Result<Metadata, Vec<FieldViolation>> {
        Metadata::parse(
            "metadata",
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        )
    }

    #[test]
    fn every_limit_holds_at_its_edge() {
        let key = "k".repeat(MAX_KEY_LEN);
        let value = "é".repeat(MAX_VALUE_CHARS);
        assert!(parse(&[(&key, &value), ("a.b-c_D9", "")]).is_ok());
        let fifty: Vec<(String, String)> = (0..MAX_PAIRS)
            .map(|i| (format!("k{i}"), value.clone()))
            .collect();
        assert!(Metadata::parse("metadata", fifty.clone()).is_ok());
        let mut fifty_one = fifty;
        fifty_one.push(("one-more".into(), String::new()));
        assert!(Metadata::parse("metadata", fifty_one).is_err());
        assert!(parse(&[("k", &"é".repeat(MAX_VALUE_CHARS + 1))]).is_err());
    }

    #[test]
    fn bad_keys_are_named() {
        let long = "k".repeat(MAX_KEY_LEN + 1);
        for bad in ["has space", "a/b", "", long.as_str(), "café"] {
            let violations = parse(&[(bad, "v")]).unwrap_err();
            assert_eq!(violations.len(), 1, "{bad:?}");
            assert_eq!(violations[0].field, "metadata");
            assert!(violations[0].description.contains(&format!("{bad:?}")));
        }
    }

    #[test]
    fn the_stored_value_reads_back_and_garbage_does_not() {
        let pairs = parse(&[("a", ""), ("order_id", "€ 1"), ("z", "x")]).unwrap();
        assert_eq!(Metadata::decode(&pairs.encode()), Some(pairs.clone()));
        assert_eq!(Metadata::decode(&[]), Some(Metadata::NONE));
        let mut cut = pairs.encode();
        cut.pop();
        assert_eq!(Metadata::decode(&cut), None);
        assert_eq!(Metadata::decode(&[0, 0, 0, 9, b'a']), None);
    }

    #[test]
    fn the_fingerprint_is_of_the_set_and_nothing_without_pairs() {
        let print = |m: &Metadata| {
            Fingerprint::new("Pay", |f| {
                f.u64(1);
                m.fingerprint(f);
            })
        };
        let without = Fingerprint::new("Pay", |f| f.u64(1));
        assert_eq!(print(&Metadata::default()), without);
        let ab = parse(&[("a", "1"), ("b", "2")]).unwrap();
        let ba = parse(&[("b", "2"), ("a", "1")]).unwrap();
        assert_eq!(print(&ab), print(&ba));
        for other in [
            parse(&[("a", "1")]).unwrap(),
            parse(&[("a", "1"), ("b", "2 ")]).unwrap(),
            parse(&[("a", "1"), ("B", "2")]).unwrap(),
            parse(&[("a1", ""), ("b", "2")]).unwrap(),
        ] {
            assert_ne!(print(&ab), print(&other), "{other:?}");
        }
    }
}
