//! The web console (SPEC 6): pages for people, served by the ledger process itself
//! (`--console-addr`), from the same reads as the gRPC API.
//!
//! Every page reads through [`Reader`], the read RPCs the gRPC service answers
//! with: the same parsing, page tokens and database reads, so a page shows
//! exactly what the RPC answers; and through its [`Admission`](crate::grpc::Admission),
//! so a page is granted and limited as the RPCs it mirrors are (the account
//! page needs GetAccount, ListEntries and ListHolds; the searches ListAccounts
//! and SearchEntries; a balance at a point GetBalance), and counts under the same
//! limit of concurrent calls; the tail is a WatchEntries watcher, under the
//! watchers' limit.
//!
//! Read-only by construction: the console holds a `Reader`, whose database handle
//! (`db::Reads`) has no way to the keyed path, and its router has GET (and so
//! HEAD) routes only, besides `POST /login` and `POST /logout`, which open and
//! end a session (in memory) and set and clear its cookie. Any other method on
//! any address is answered 405, and an address that names nothing 404, each with
//! a page; a request sent to a name not the console's, 421.
//!
//! - `state`: the [`Console`] every page shares: the reads, the health state,
//!   the tokens, the sessions, the names it answers to.
//! - `router`: the addresses, each to its page, and the headers every answer
//!   carries; [`serve`].
//! - `frame`: what frames every page: the navigation bar and the rendering.
//! - `auth`: with tokens configured, the token form, the login and logout, and
//!   the client a request's session cookie names.
//! - `session`: the sessions, kept in memory, each a random id carrying a
//!   client with the console's grants alone.
//! - `settings`: where it listens and the names it answers to, made from the
//!   flags by `config`.
//! - `failure`: errors as HTTP answers, by their gRPC status (SPEC 6's mapping).
//! - `host`: the names the console answers to; a request to any other is 421,
//!   so a DNS-rebound page reads nothing.
//! - `view`: values as people read them: times in UTC, amounts in their
//!   currency's units (with the API's minor units for machines), every id a
//!   link, a key only on the reader's own rows.
//! - `chart`: an account's balance as a line, drawn by the server as SVG.
//! - `stored`: a key's stored outcome as people read it: a reply decoded by its
//!   method and shown as the pages show what it holds; a decline's status.
//! - `query`: a page's query string read into a struct (axum's `Query`), the
//!   blank fields of a search form dropped from its address, and the ids and
//!   pairs a page reads from its address.
//! - `pages`: one module per page.
//! - `assets`: the stylesheet and the tail's script, compiled into the binary.
//!
//! This module only declares them and names what the service uses: each takes
//! what it needs from its siblings, none from a parent, and no two import each
//! other, through any path.

mod assets;
mod auth;
mod chart;
mod failure;
mod frame;
mod host;
mod pages;
mod query;
mod router;
mod session;
mod settings;
mod state;
mod stored;
mod view;

pub use self::host::HostName;
pub use self::router::serve;
pub use self::session::Clock;
pub use self::settings::ConsoleSettings;
pub use self::state::Console;
