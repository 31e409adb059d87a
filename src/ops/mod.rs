//! The keyed operations, one module each, and the registry that wires them in.
//!
//! An operation's module holds everything the service knows about it: its
//! request parsing and validation, the fields its key is bound to
//! (`fingerprint`), the rows it locks (`needs`), its decision against those rows
//! (`decide`, through the [`Book`], with no SQL), its reply message, the entries
//! and hold that reply names (for `ledger audit`), and the effects it leaves
//! (for retention). A decline only it can meet is made in its module, with its
//! reason, message and details together; the shared rules' declines are the
//! [`Book`]'s ([`Decline`](crate::ledger::Decline)).
//!
//! [`operations!`] lists them, one line each, and everything else is generated
//! from that list: the modules, the [`Method`] enum with its stored codes, the
//! tonic handlers (`grpc::service`) and the look-ups by method below. The
//! executor (`db`) sees a call only as a [`Command`] and names no operation.
//!
//! Adding an operation: its messages and RPC in the proto, a module here whose
//! type implements [`Operation`], and its line in [`operations!`].
//!
//! - `operation`: what an operation is, and how the executor sees one.
//! - `method`: [`Method`], generated from the registry.
//! - `parse`, `messages`: what the operations share on the wire side.
//! - `account_amount`: the fields of Credit and Charge.
//! - `subscription`: what the subscription operations share.

pub(crate) mod account_amount;
mod keyed;
mod messages;
mod method;
mod operation;
mod parse;
pub(crate) mod subscription;
#[cfg(test)]
pub(crate) mod testing;

pub use keyed::{Command, Keyed};
pub use messages::{account_message, entry_message, hold_message, limits_message, timestamp};
pub use method::{Method, Registered};
pub(crate) use operation::lacks_a_field;
pub use operation::{Named, Operation};
pub use parse::{Violations, single};

/// Every keyed operation: its stored method code (kept with each key row: never
/// renumber or reuse one; 12 to 14 are kept for account sets), its type, and its
/// RPC, which names its module.
/// Expands to `$callback! { code => Type rpc, ... }`.
macro_rules! operations {
    ($callback:ident) => {
        $callback! {
            1 => OpenAccount open_account,
            2 => Credit credit,
            3 => Charge charge,
            4 => Transfer transfer,
            5 => Refund refund,
            6 => PlaceHold place_hold,
            7 => CaptureHold capture_hold,
            8 => VoidHold void_hold,
            9 => Post post,
            10 => SetLimits set_limits,
            11 => Reverse reverse,
            15 => CreateSubscription create_subscription,
            16 => PauseSubscription pause_subscription,
            17 => ResumeSubscription resume_subscription,
            18 => DeleteSubscription delete_subscription,
        }
    };
}
pub(crate) use operations;

/// The operations' modules.
macro_rules! modules {
    ($($code:literal => $op:ident $rpc:ident,)*) => {
        $(
            mod $rpc;
            pub use $rpc::$op;
        )*
    };
}

operations!(modules);
