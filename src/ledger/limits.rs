//! An account's limits (SPEC 3.9): how low a debit may take what it has
//! available, and how high a credit may take its balance.
//!
//! The defaults are the safe ones, a floor at zero and no ceiling: every account
//! had them before limits existed, and a request that leaves them out asks for
//! them. They are checked by the [`Book`](super::Book) in the transaction that
//! moves the money, under the account's lock, against the limits in force at that
//! instant.

use super::fingerprint::Fields;
use super::values::FieldViolation;

/// The floor and the ceiling of one account; the floor is never above the
/// ceiling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Limits {
    /// The lowest `available` (balance less held) a debit may leave; `None`: no
    /// floor at all (settlement and funding accounts).
    floor: Option<i64>,
    /// The highest balance a credit may leave; `None`: no ceiling.
    ceiling: Option<i64>,
}

impl Default for Limits {
    /// A floor at zero and no ceiling.
    fn default() -> Self {
        Self {
            floor: Some(0),
            ceiling: None,
        }
    }
}

/// `AccountLimits` as it arrives: `min_balance`, `no_min_balance`, `max_balance`.
pub type RawLimits = (i64, bool, Option<i64>);

impl Limits {
    /// Limits from their stored columns (`NULL`: none), which the schema keeps
    /// ordered; `None` if they are not.
    pub fn new(floor: Option<i64>, ceiling: Option<i64>) -> Option<Self> {
        match (floor, ceiling) {
            (Some(floor), Some(ceiling)) if floor > ceiling => None,
            _ => Some(Self { floor, ceiling }),
        }
    }

    /// Validates an `AccountLimits` of the request field `field` (`limits`), with
    /// each violation named as `limits.min_balance` or `limits.max_balance`.
    pub fn parse(field: &'static str, raw: RawLimits) -> Result<Self, Vec<FieldViolation>> {
        let (min_balance, no_min_balance, max_balance) = raw;
        let name = |sub: &str| format!("{field}.{sub}");
        if no_min_balance && min_balance != 0 {
            return Err(vec![FieldViolation::new(
                name("min_balance"),
                format!("must be 0 with no_min_balance (no floor), not {min_balance}"),
            )]);
        }
        let floor = (!no_min_balance).then_some(min_balance);
        Self::new(floor, max_balance).ok_or_else(|| {
            vec![FieldViolation::new(
                name("max_balance"),
                format!(
                    "must be at least min_balance ({min_balance}), not {}",
                    max_balance.unwrap_or_default()
                ),
            )]
        })
    }

    pub fn floor(self) -> Option<i64> {
        self.floor
    }

    pub fn ceiling(self) -> Option<i64> {
        self.ceiling
    }

    /// The wire's spelling: `(min_balance, no_min_balance, max_balance)`.
    pub fn raw(self) -> RawLimits {
        (self.floor.unwrap_or(0), self.floor.is_none(), self.ceiling)
    }

    /// Whether a debit may leave `available` (the balance less what is held).
    pub fn allows_available(self, available: i64) -> bool {
        self.floor.is_none_or(|floor| available >= floor)
    }

    /// Whether a credit may leave `balance`.
    pub fn allows_balance(self, balance: i64) -> bool {
        self.ceiling.is_none_or(|ceiling| balance <= ceiling)
    }

    /// Feeds the limits to a fingerprint: the floor (with whether there is one),
    /// then the ceiling likewise.
    pub fn fingerprint(self, fields: &mut Fields) {
        for bound in [self.floor, self.ceiling] {
            fields.u64(u64::from(bound.is_some()));
            fields.i64(bound.unwrap_or(0));
        }
    }

    /// Feeds the limits to the fingerprint of a request in which they are
    /// optional: nothing for the defaults, so a request made before limits
    /// existed keeps its fingerprint (SPEC 3.9).
    pub fn fingerprint_unless_default(self, fields: &mut Fields) {
        if self != Self::default() {
            fields.str("limits");
            self.fingerprint(fields);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(violations: Vec<FieldViolation>) -> Vec<String> {
        violations
            .into_iter()
            .map(|v| v.field.into_owned())
            .collect()
    }

    #[test]
    fn an_empty_message_is_the_default_floor_at_zero_without_a_ceiling() {
        assert_eq!(
            Limits::parse("limits", (0, false, None)),
            Ok(Limits::default())
        );
        assert_eq!(Limits::default().raw(), (0, false, None));
    }

    #[test]
    fn floors_may_be_negative_positive_or_absent() {
        for raw in [
            (-5000, false, None),
            (2500, false, Some(2500)),
            (0, true, Some(-7)),
        ] {
            let limits = Limits::parse("limits", raw).unwrap();
            assert_eq!(limits.raw(), raw);
        }
    }

    #[test]
    fn a_floor_above_the_ceiling_or_a_floor_with_no_floor_is_invalid() {
        let above = Limits::parse("limits", (10, false, Some(9))).unwrap_err();
        assert_eq!(fields(above), ["limits.max_balance"]);
        let both = Limits::parse("limits", (-1, true, None)).unwrap_err();
        assert_eq!(fields(both), ["limits.min_balance"]);
        assert_eq!(Limits::new(Some(1), Some(0)), None);
    }

    #[test]
    fn the_bounds_are_inclusive() {
        let limits = Limits::parse("limits", (-100, false, Some(100))).unwrap();
        assert!(limits.allows_available(-100) && !limits.allows_available(-101));
        assert!(limits.allows_balance(100) && !limits.allows_balance(101));
        let open = Limits::parse("limits", (0, true, None)).unwrap();
        assert!(open.allows_available(i64::MIN) && open.allows_balance(i64::MAX));
    }

    #[test]
    fn default_limits_add_nothing_to_a_fingerprint_and_others_all_count() {
        use super::super::fingerprint::Fingerprint;
        let print = |limits: Limits| {
            Fingerprint::new("OpenAccount", |f| {
                f.str("USD");
                limits.fingerprint_unless_default(f);
            })
        };
        let before_limits = Fingerprint::new("OpenAccount", |f| f.str("USD"));
        assert_eq!(print(Limits::default()), before_limits);
        let variants = [
            Limits::new(None, None).unwrap(),
            Limits::new(Some(-1), None).unwrap(),
            Limits::new(Some(0), Some(0)).unwrap(),
            Limits::new(None, Some(0)).unwrap(),
        ];
        for (i, a) in variants.iter().enumerate() {
            assert_ne!(print(*a), before_limits);
            for b in variants.iter().skip(i + 1) {
                assert_ne!(print(*a), print(*b), "{a:?} {b:?}");
            }
        }
    }
}
