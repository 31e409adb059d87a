//! Whether each node of the keyed pools can take writes its cluster keeps.
//!
//! A node cut off from the rest of its cluster still accepts connections: a
//! Galera node goes non-primary and refuses statements (1047), a Group
//! Replication member in a minority lets writes wait for a majority. Neither
//! looks like a lost connection, so the routing would go on sending its accounts
//! there. The health check asks every node each interval, on a connection of its
//! own (the keyed pools may all be busy, or waiting on the node), and the routing
//! passes over a node that is outside the primary component until it is back.

use std::time::Duration;

use super::cluster::{self, Engine};
use super::connection::{self, Conn};
use super::route::{Node, Nodes};
use crate::telemetry::metrics;

/// One node URL and the connection that watches it.
struct Watch {
    url: String,
    conn: Option<(Conn, Engine)>,
}

impl Watch {
    /// Whether the node takes writes, asked within `limit` (opening a connection
    /// first if there is none); no answer is "no", and the connection is dropped
    /// so the next check opens a new one.
    async fn takes_writes(&mut self, limit: Duration) -> bool {
        let watched = self.conn.take();
        let url = &self.url;
        let check = async move {
            let (mut conn, engine) = if let Some(watched) = watched {
                watched
            } else {
                let mut conn = connection::connect(url).await.ok()?;
                let engine = cluster::engine(&mut conn).await.ok()?;
                (conn, engine)
            };
            let takes = cluster::takes_writes(&mut conn, engine).await.ok()?;
            Some((conn, engine, takes))
        };
        match tokio::time::timeout(limit, check).await {
            Ok(Some((conn, engine, takes))) => {
                self.conn = Some((conn, engine));
                takes
            }
            _ => false,
        }
    }
}

/// The watches of every node's URLs, in node order.
pub struct Membership {
    nodes: Vec<Vec<Watch>>,
}

impl std::fmt::Debug for Membership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Membership")
            .field("nodes", &self.nodes.len())
            .finish()
    }
}

impl Membership {
    pub fn new(nodes: &Nodes) -> Self {
        let watches = |node: &Node| {
            node.urls()
                .iter()
                .map(|url| Watch {
                    url: url.clone(),
                    conn: None,
                })
                .collect()
        };
        Self {
            nodes: nodes.iter().map(watches).collect(),
        }
    }

    /// Asks every node at once, each within `limit`, tells the routing what it
    /// found, and returns whether any node takes writes. A node with several
    /// URLs (one pool, `first` routing) takes them if any of its URLs does.
    pub async fn check(&mut self, nodes: &Nodes, limit: Duration) -> bool {
        let answers = futures::future::join_all(self.nodes.iter_mut().map(|watches| async move {
            for watch in watches.iter_mut() {
                if watch.takes_writes(limit).await {
                    return true;
                }
            }
            false
        }))
        .await;
        let mut any = false;
        for (node, takes) in nodes.iter().zip(answers) {
            nodes.set_takes_writes(node, takes);
            metrics::node_takes_writes(node.name(), takes);
            any |= takes;
        }
        any
    }
}
