//! The read RPCs, one module each, and the registry that wires them in. A read
//! parses its request, reads through the [`Reader`] (the database's reads, whose
//! SQL lives with the tables it reads, and the page tokens), and makes its
//! reply. The gRPC service and the console answer the same reads through it,
//! so a page and an RPC cannot differ.
//!
//! [`reads!`] lists them, one line each; the modules, [`ReadRpc`] and the tonic
//! handlers (`grpc::service`) are generated from the list. `WatchEntries`, a
//! stream, is the [`Reader`]'s own.
//!
//! Adding a read: its messages and RPC in the proto, a module here whose type
//! implements [`Read`], and its line in [`reads!`].

mod parse;
mod reader;

pub use reader::{Named, Read, Reader};

/// Every read RPC: its type, and its RPC, which names its module. Expands to
/// `$callback! { $($prefix)* ; Type rpc, ... }`.
macro_rules! reads {
    ($callback:ident { $($prefix:tt)* }) => {
        $callback! { $($prefix)* ;
            GetAccount get_account,
            GetEntry get_entry,
            ListEntries list_entries,
            GetHold get_hold,
            LookupKey lookup_key,
            SearchEntries search_entries,
            ListAccounts list_accounts,
            ListHolds list_holds,
            GetBalance get_balance,
            GetSubscription get_subscription,
            ListSubscriptions list_subscriptions,
        }
    };
}
pub(crate) use reads;

/// The modules, their names, and [`ReadRpc`].
macro_rules! registry {
    (; $($read:ident $rpc:ident,)*) => {
        $(
            mod $rpc;
            pub use $rpc::$read;

            impl Named for $read {
                const NAME: &'static str = stringify!($read);
            }
        )*

        /// The read RPCs, by name.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, strum::EnumIter)]
        pub enum ReadRpc {
            $($read,)*
        }

        impl ReadRpc {
            /// The RPC's name in the `ledger.v1.Ledger` service.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Self::$read => <$read as Named>::NAME,)*
                }
            }
        }
    };
}

reads!(registry {});
