//! The ledger's RPCs as the client sees them: one line each in [`rpcs!`], which
//! generates the typed method of [`Client`](crate::Client), the marker type the
//! retry loop is generic over, and [`METHODS`], the list a test holds against the
//! proto. `WatchEntries` (server streaming) is not here: its resuming watcher
//! is the `watch` module, beside this one.

use std::marker::PhantomData;

use bytes::{BufMut as _, Bytes};
use ledger_proto::pb;
use prost::Message;
use tonic::Status;
use tonic::codec::{Codec, EncodeBuf, Encoder};
use tonic_prost::ProstDecoder;

/// A unary RPC of `ledger.v1.Ledger`.
pub(crate) trait Rpc {
    type Request: Message;
    type Reply: Message + Default + Send + 'static;
    /// The full gRPC method name, as a `KeyRecord` stores it.
    const PATH: &'static str;
    /// The request's idempotency key, for a keyed RPC.
    fn key(request: &mut Self::Request) -> Option<&mut String>;
}

/// One RPC of the service, as [`METHODS`] lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Method {
    /// The RPC's name in the proto, e.g. `Charge`.
    pub name: &'static str,
    /// The full gRPC method name, e.g. `/ledger.v1.Ledger/Charge`.
    pub path: &'static str,
    /// Whether its request carries an idempotency key.
    pub keyed: bool,
}

macro_rules! rpcs {
    ($( $(#[$doc:meta])* $call:ident: $name:ident($request:ident) -> $reply:ident, $kind:ident; )*) => {
        pub(crate) mod marker {
            $( pub(crate) struct $name; )*
        }

        $(
            impl Rpc for marker::$name {
                type Request = pb::$request;
                type Reply = pb::$reply;
                const PATH: &'static str = concat!("/ledger.v1.Ledger/", stringify!($name));
                fn key(request: &mut pb::$request) -> Option<&mut String> {
                    rpcs!(@key $kind request)
                }
            }
        )*

        /// Every unary RPC the client calls, in the proto's order.
        pub const METHODS: &[Method] = &[$(
            Method {
                name: stringify!($name),
                path: concat!("/ledger.v1.Ledger/", stringify!($name)),
                keyed: rpcs!(@keyed $kind),
            },
        )*];

        impl crate::Client {
            $(
                $(#[$doc])*
                pub async fn $call(
                    &self,
                    request: pb::$request,
                ) -> Result<crate::Answer<pb::$reply>, crate::Error> {
                    self.call::<marker::$name>(request).await
                }
            )*
        }
    };
    (@key keyed $request:ident) => { Some(&mut $request.idempotency_key) };
    (@key read $request:ident) => {{ let _ = $request; None }};
    (@keyed keyed) => { true };
    (@keyed read) => { false };
}

rpcs! {
    /// Opens an account; keyed (a key is made when the request has none).
    open_account: OpenAccount(OpenAccountRequest) -> OpenAccountReply, keyed;
    /// Adds money to an account; keyed.
    credit: Credit(CreditRequest) -> CreditReply, keyed;
    /// Takes money from an account; keyed.
    charge: Charge(ChargeRequest) -> ChargeReply, keyed;
    /// Reads an account.
    get_account: GetAccount(GetAccountRequest) -> Account, read;
    /// Moves money between two accounts; keyed.
    transfer: Transfer(TransferRequest) -> TransferReply, keyed;
    /// Returns money a charge or capture took; keyed.
    refund: Refund(RefundRequest) -> RefundReply, keyed;
    /// Reserves money until it is captured, voided or expires; keyed.
    place_hold: PlaceHold(PlaceHoldRequest) -> PlaceHoldReply, keyed;
    /// Takes up to the held amount; keyed.
    capture_hold: CaptureHold(CaptureHoldRequest) -> CaptureHoldReply, keyed;
    /// Releases a hold; keyed.
    void_hold: VoidHold(VoidHoldRequest) -> VoidHoldReply, keyed;
    /// Reads one journal entry.
    get_entry: GetEntry(GetEntryRequest) -> Entry, read;
    /// Reads a page of an account's journal.
    list_entries: ListEntries(ListEntriesRequest) -> ListEntriesReply, read;
    /// Reads one hold.
    get_hold: GetHold(GetHoldRequest) -> Hold, read;
    /// What happened under a key; executes nothing. The stored reply comes as
    /// bytes: decode it as the reply of `KeyRecord::method`.
    lookup_key: LookupKey(LookupKeyRequest) -> KeyRecord, read;
    /// Several transfers that take effect together or not at all; keyed.
    post: Post(PostRequest) -> PostReply, keyed;
    /// Replaces an account's limits, recorded as a LIMITS entry; keyed.
    set_limits: SetLimits(SetLimitsRequest) -> SetLimitsReply, keyed;
    /// Entries by metadata, in sequence order; reads its own writes.
    search_entries: SearchEntries(SearchEntriesRequest) -> SearchEntriesReply, read;
    /// Accounts by metadata, by id.
    list_accounts: ListAccounts(ListAccountsRequest) -> ListAccountsReply, read;
    /// Reads a page of an account's open holds, oldest first.
    list_holds: ListHolds(ListHoldsRequest) -> ListHoldsReply, read;
    /// An account's balance and limits at a sequence, a time, or now.
    get_balance: GetBalance(GetBalanceRequest) -> Balance, read;
    /// Undoes a Transfer, a Post or a Credit named by its key, once; keyed.
    reverse: Reverse(ReverseRequest) -> ReverseReply, keyed;
}

/// A codec whose requests are already encoded: a retry resends the very bytes of
/// the first attempt, not a re-encoding of the message.
pub(crate) struct PreEncoded<U>(PhantomData<fn() -> U>);

impl<U> Default for PreEncoded<U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<U: Message + Default + Send + 'static> Codec for PreEncoded<U> {
    type Encode = Bytes;
    type Decode = U;
    type Encoder = BytesEncoder;
    type Decoder = ProstDecoder<U>;

    fn encoder(&mut self) -> BytesEncoder {
        BytesEncoder
    }

    fn decoder(&mut self) -> ProstDecoder<U> {
        ProstDecoder::default()
    }
}

pub(crate) struct BytesEncoder;

impl Encoder for BytesEncoder {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}
