//! One module per page. A page reads through the console's `Reader` under the
//! grants of the RPCs it mirrors, and renders their answers; the addresses are
//! SPEC 6's. A search by metadata (`/accounts`, `/entries`) names its pairs as
//! `?metadata=KEY:VALUE`, once per pair, form-urlencoded: the same address
//! whether typed, linked from a pair on a page, or sent by a search form.
//! What they share of reading their address is `query`'s.

pub(super) mod account;
pub(super) mod accounts;
pub(super) mod balance;
pub(super) mod entry;
pub(super) mod health;
pub(super) mod hold;
pub(super) mod home;
pub(super) mod key;
pub(super) mod search;
pub(super) mod subscriptions;
pub(super) mod tail;
