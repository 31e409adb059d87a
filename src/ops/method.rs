//! The keyed RPCs as the executor and the key rows know them: [`Method`], with
//! its stored codes and the look-ups by method, generated from the registry.

use super::operation::{Named, Operation, Registered, Reversal, named};
use crate::ledger::{Effect, EntryKind};

/// The `Method` enum and its look-ups, and each operation's place in it.
macro_rules! methods {
    ($($code:literal => $op:ident $rpc:ident,)*) => {
        $(
            impl Registered for super::$rpc::$op {
                const METHOD: Method = Method::$op;
            }
        )*

        /// The keyed RPCs. The discriminant is stored with each key row, so a key
        /// used for one method can never replay as another.
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, Hash,
            strum::FromRepr, strum::EnumIter, strum::IntoStaticStr,
        )]
        #[repr(u8)]
        pub enum Method {
            $($op = $code,)*
        }

        impl Method {
            /// What a successful call leaves behind.
            pub fn effects(self) -> &'static [Effect] {
                match self {
                    $(Self::$op => <super::$rpc::$op as Operation>::EFFECTS,)*
                }
            }

            /// The kinds of the entries a successful call writes, in order, as a
            /// regular expression over their codes joined by commas.
            pub fn entries_pattern(self) -> String {
                match self {
                    $(Self::$op => <super::$rpc::$op as Operation>::entries_pattern(),)*
                }
            }

            /// Whether `Reverse` may undo a success of it.
            pub fn reversal(self) -> Reversal {
                match self {
                    $(Self::$op => <super::$rpc::$op as Operation>::REVERSAL,)*
                }
            }

            /// What a stored reply of this method names, or why it is unsound.
            pub fn named(self, reply: &[u8]) -> Result<Named, String> {
                match self {
                    $(Self::$op => named::<super::$rpc::$op>(reply),)*
                }
            }
        }
    };
}

super::operations!(methods);

impl Method {
    /// The RPC's name in the `ledger.v1.Ledger` service.
    pub fn name(self) -> &'static str {
        self.into()
    }

    pub fn code(self) -> u8 {
        self as u8
    }

    pub fn from_code(code: u8) -> Option<Self> {
        Self::from_repr(code)
    }

    /// The entries a successful call writes to the journal, in order.
    pub fn entry_kinds(self) -> impl Iterator<Item = EntryKind> {
        self.effects().iter().filter_map(|effect| match effect {
            Effect::Entry(kind) => Some(*kind),
            _ => None,
        })
    }

    /// The method whose calls leave `effect`, unless several do.
    pub fn leaving(effect: Effect) -> Option<Self> {
        Self::leaving_other_than(effect, None)
    }

    /// [`Method::leaving`], of the methods other than `except` (an effect known
    /// not to be its).
    pub fn leaving_other_than(effect: Effect, except: impl Into<Option<Self>>) -> Option<Self> {
        use strum::IntoEnumIterator as _;
        let except = except.into();
        let mut leaving = Self::iter()
            .filter(|method| Some(*method) != except && method.effects().contains(&effect));
        match (leaving.next(), leaving.next()) {
            (Some(one), None) => Some(one),
            _ => None,
        }
    }
}

#[cfg(test)]
mod registry_tests {
    use strum::IntoEnumIterator as _;

    use super::*;
    use crate::ledger::Effect;

    #[test]
    fn stored_codes_round_trip_and_every_entry_kind_has_its_writer() {
        for m in Method::iter() {
            assert_eq!(Method::from_code(m.code()), Some(m));
        }
        assert_eq!(Method::from_code(0), None);
        assert_eq!(Method::CaptureHold.name(), "CaptureHold");
        for kind in EntryKind::iter() {
            assert!(
                Method::iter().any(|m| m.entry_kinds().any(|k| k == kind)),
                "{kind:?}"
            );
        }
        assert_eq!(
            Method::leaving(Effect::Entry(EntryKind::Credit)),
            Some(Method::Credit)
        );
        // Charges and reversals both write charges, transfers, posts and
        // reversals transfer entries: none is named.
        assert_eq!(Method::leaving(Effect::Entry(EntryKind::Charge)), None);
        assert_eq!(Method::leaving(Effect::Entry(EntryKind::TransferOut)), None);
        assert_eq!(
            Method::leaving(Effect::ResolvedHold(crate::ledger::HoldState::Voided)),
            Some(Method::VoidHold)
        );
    }
}
