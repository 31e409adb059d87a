//! The `ledger_secrets` table: secrets every instance of a deployment shares,
//! made by the migrations.

use anyhow::Context as _;
use diesel::QueryableByName;
use diesel::sql_types::Binary;
use diesel_async::RunQueryDsl as _;

use crate::db::conn::connection::connect;

#[derive(QueryableByName)]
struct Secret {
    #[diesel(sql_type = Binary)]
    value: Vec<u8>,
}

/// The key of ListEntries' page tokens.
pub async fn page_token_key(url: &str) -> anyhow::Result<Vec<u8>> {
    let mut conn = connect(url)
        .await
        .context("cannot read the page-token key")?;
    let secret: Secret =
        diesel::sql_query("SELECT value FROM ledger_secrets WHERE name = 'page-tokens'")
            .get_result(&mut conn)
            .await
            .context("cannot read the page-token key (are the migrations applied?)")?;
    Ok(secret.value)
}
