//! Which node of a cluster a keyed transaction goes to.
//!
//! With one database URL there is nothing to choose. With several (the nodes of
//! a multi-primary cluster), [`Routing::First`] sends every transaction to the
//! first node that answers, so instances on different nodes write the same
//! account through different nodes: their row locks do not meet, and the
//! conflict surfaces at certification, as a rollback to retry.
//! [`Routing::Account`] chooses the node from the account the transaction writes
//! (rendezvous hashing over the nodes that answer), so every instance writes one
//! account through one node, where duplicates and contention park on row locks
//! as on a single server. When that node stops answering, its accounts move to
//! the node that scores next for them, and come back when it answers again.
//!
//! The choice is the same in every instance: a node is scored by its
//! `host:port` as written in the URL (instances must name the nodes alike; their
//! order does not matter) and SHA-256, whose output no build or platform changes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha2::{Digest as _, Sha256};
use tokio::time::Instant;

use super::pool::{self, Pool, PoolSettings, Role, Session};
use crate::ledger::{AccountId, ScopedKey};

/// How keyed transactions choose among several database URLs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Routing {
    /// Every transaction to the first node, in the order given, that answers
    First,
    /// Each transaction to a node chosen from the account it writes (a transfer
    /// by its lower account id), among the nodes that answer
    #[default]
    Account,
}

/// A node that failed is passed over for this long before it is tried again.
const PASS_OVER: Duration = Duration::from_secs(5);

/// What a transaction is routed by: the lowest account it touches (those it
/// names, and those of the entries and holds it names, looked up before: see
/// `exec::locate`), else its key (an account not yet opened, or a look-up that
/// went unanswered), so at least the copies of one request meet on one node.
/// Routing decides where contention waits, never what commits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Route(Vec<u8>);

impl Route {
    pub(crate) fn of(accounts: &[AccountId], key: &ScopedKey) -> Self {
        if let Some(account) = accounts.iter().min() {
            return Self::account(account.get());
        }
        let mut bytes = b"key:".to_vec();
        bytes.extend_from_slice(key.namespace.as_str().as_bytes());
        bytes.push(0);
        bytes.extend_from_slice(key.key.as_str().as_bytes());
        Self(bytes)
    }

    /// The route of a transaction that touches only this account.
    pub(crate) fn account(id: u64) -> Self {
        let mut bytes = b"account:".to_vec();
        bytes.extend_from_slice(&id.to_be_bytes());
        Self(bytes)
    }
}

/// One node and its pool.
#[derive(Debug)]
pub struct Node {
    /// `host:port`, the node's name in the hash.
    name: String,
    /// The URLs of the pool (one per node when routed by account), which the
    /// health check watches (`db::conn::membership`).
    urls: Vec<String>,
    pool: Pool,
    /// Until when the node is passed over (it failed).
    passed_over_until: Mutex<Option<Instant>>,
    /// The last health check found the node outside its cluster's primary
    /// component (cut off, or not a member): passed over until one finds it back.
    outside: AtomicBool,
}

impl Node {
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn urls(&self) -> &[String] {
        &self.urls
    }

    fn passed_over(&self, now: Instant) -> bool {
        if AtomicBool::load(&self.outside, Ordering::Acquire) {
            return true;
        }
        let until = self.passed_over_until.lock().map_or(None, |u| *u);
        until.is_some_and(|until| now < until)
    }

    fn score(&self, route: &Route) -> [u8; 32] {
        let mut hash = Sha256::new();
        hash.update(self.name.as_bytes());
        hash.update([0]);
        hash.update(&route.0);
        hash.finalize().into()
    }
}

/// The keyed pools: one over all URLs (first answering), or one per node.
#[derive(Debug, Clone)]
pub struct Nodes {
    nodes: Arc<[Node]>,
}

impl Nodes {
    /// Pools for `urls`. Per node only with [`Routing::Account`] and more than
    /// one URL; each node's pool may then open `settings.size` connections.
    pub fn build(
        urls: &[String],
        settings: PoolSettings,
        role: Role,
        session: &Session,
        routing: Routing,
    ) -> Self {
        let node = |urls: &[String]| Node {
            name: urls.first().map_or_else(String::new, |u| host_port(u)),
            urls: urls.to_vec(),
            pool: pool::build(urls, settings, role, session),
            passed_over_until: Mutex::new(None),
            outside: AtomicBool::new(false),
        };
        let nodes = if routing == Routing::First || urls.len() < 2 {
            vec![node(urls)]
        } else {
            urls.iter()
                .map(|url| node(std::slice::from_ref(url)))
                .collect()
        };
        Self {
            nodes: nodes.into(),
        }
    }

    /// The node for `route`: the highest scoring of those not passed over, or
    /// the highest scoring of all when every node failed lately.
    pub(crate) fn choose(&self, route: &Route) -> &Node {
        let now = Instant::now();
        let mut best: Option<(&Node, [u8; 32])> = None;
        let mut best_live: Option<(&Node, [u8; 32])> = None;
        for node in self.nodes.iter() {
            let score = node.score(route);
            if best.as_ref().is_none_or(|(_, s)| score > *s) {
                best = Some((node, score));
            }
            if !node.passed_over(now) && best_live.as_ref().is_none_or(|(_, s)| score > *s) {
                best_live = Some((node, score));
            }
        }
        match best_live.or(best) {
            Some((node, _)) => node,
            // `build` always makes at least one node.
            None => self.first(),
        }
    }

    /// A node for a transaction that names no account and has no key to route
    /// by (a key look-up): the first, in the order given, not passed over.
    pub(crate) fn choose_any(&self) -> &Node {
        let now = Instant::now();
        self.nodes
            .iter()
            .find(|node| !node.passed_over(now))
            .unwrap_or_else(|| self.first())
    }

    /// The node failed (a connection to it was lost or refused): its accounts
    /// go to their next node for a while. With a single pool there is nothing
    /// else to go to.
    pub(crate) fn pass_over(&self, node: &Node) {
        if self.nodes.len() < 2 {
            return;
        }
        let now = Instant::now();
        if !node.passed_over(now) {
            tracing::warn!(node = %node.name, for_ = ?PASS_OVER, "node failed; its accounts move to their next node");
        }
        if let Ok(mut until) = node.passed_over_until.lock() {
            *until = Some(now + PASS_OVER);
        }
    }

    /// What the health check found of `node`: whether it can take writes its
    /// cluster keeps. A node that cannot is passed over until one finds it can;
    /// with a single pool there is nothing else to go to.
    pub fn set_takes_writes(&self, node: &Node, takes_writes: bool) {
        if self.nodes.len() < 2 {
            return;
        }
        let was_outside = node.outside.swap(!takes_writes, Ordering::AcqRel);
        if was_outside == takes_writes {
            if takes_writes {
                tracing::info!(node = %node.name, "node back in its cluster's primary component; its accounts come back");
            } else {
                tracing::warn!(node = %node.name, "node outside its cluster's primary component; its accounts move to their next node");
            }
        }
    }

    /// The first node's pool (the only one with `first` routing).
    pub fn first(&self) -> &Node {
        #[allow(clippy::indexing_slicing)] // `build` always makes at least one node.
        &self.nodes[0]
    }

    pub fn iter(&self) -> impl Iterator<Item = &Node> {
        self.nodes.iter()
    }
}

/// `host:port` of a URL: how instances name a node alike whatever credentials
/// or options their URLs carry.
fn host_port(url: &str) -> String {
    mysql_async::Opts::from_url(url).map_or_else(
        |_| url.to_owned(),
        |o| format!("{}:{}", o.ip_or_hostname(), o.tcp_port()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accounts(ids: &[u64]) -> Vec<AccountId> {
        ids.iter()
            .map(|a| AccountId::parse("a", *a).unwrap())
            .collect()
    }

    fn key(k: &str) -> ScopedKey {
        ScopedKey {
            namespace: crate::ledger::Namespace::anonymous(),
            key: crate::ledger::IdempotencyKey::parse("k", k.into()).unwrap(),
        }
    }

    fn nodes(names: &[&str]) -> Nodes {
        let urls: Vec<String> = names.iter().map(|n| format!("mysql://u@{n}/db")).collect();
        let settings = PoolSettings {
            size: 1,
            checkout_timeout: Duration::from_secs(1),
        };
        Nodes::build(
            &urls,
            settings,
            Role::Reads,
            &Session::default(),
            Routing::Account,
        )
    }

    #[test]
    fn a_transfer_routes_by_its_lower_account() {
        assert_eq!(
            Route::of(&accounts(&[9, 4]), &key("a")),
            Route::of(&accounts(&[4]), &key("b"))
        );
        assert_eq!(
            Route::of(&accounts(&[]), &key("a")),
            Route::of(&accounts(&[]), &key("a"))
        );
        assert_ne!(
            Route::of(&accounts(&[]), &key("a")),
            Route::of(&accounts(&[]), &key("b"))
        );
    }

    #[tokio::test]
    async fn the_choice_ignores_url_order_and_spreads_accounts() {
        let one = nodes(&["10.0.0.1:3306", "10.0.0.2:3306", "10.0.0.3:3306"]);
        let other = nodes(&["10.0.0.3:3306", "10.0.0.1:3306", "10.0.0.2:3306"]);
        let mut per_node = std::collections::BTreeMap::new();
        for account in 1..=300 {
            let route = Route::of(&accounts(&[account]), &key("k"));
            let chosen = &one.choose(&route).name;
            assert_eq!(chosen, &other.choose(&route).name);
            *per_node.entry(chosen.clone()).or_insert(0) += 1;
        }
        assert_eq!(per_node.len(), 3);
        assert!(per_node.values().all(|n| *n > 50), "{per_node:?}");
    }

    #[tokio::test]
    async fn a_failed_node_s_accounts_move_and_only_they() {
        let nodes = nodes(&["10.0.0.1:3306", "10.0.0.2:3306", "10.0.0.3:3306"]);
        let routes: Vec<Route> = (1..=100)
            .map(|a| Route::of(&accounts(&[a]), &key("k")))
            .collect();
        let before: Vec<String> = routes
            .iter()
            .map(|r| nodes.choose(r).name.clone())
            .collect();
        let failed = nodes.iter().nth(1).unwrap();
        nodes.pass_over(failed);
        for (route, was) in routes.iter().zip(&before) {
            let now = &nodes.choose(route).name;
            if *was == failed.name {
                assert_ne!(*now, failed.name);
            } else {
                assert_eq!(now, was);
            }
        }
    }

    #[tokio::test]
    async fn a_node_outside_the_primary_component_is_passed_over_until_it_is_back() {
        let nodes = nodes(&["10.0.0.1:3306", "10.0.0.2:3306", "10.0.0.3:3306"]);
        let cut = nodes.iter().nth(2).unwrap();
        let route = (1..=100)
            .map(|a| Route::of(&accounts(&[a]), &key("k")))
            .find(|r| nodes.choose(r).name == cut.name)
            .unwrap();
        nodes.set_takes_writes(cut, false);
        assert_ne!(nodes.choose(&route).name, cut.name);
        assert_ne!(nodes.choose_any().name, cut.name);
        nodes.set_takes_writes(cut, true);
        assert_eq!(nodes.choose(&route).name, cut.name);
    }
}
