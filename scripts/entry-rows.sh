#!/usr/bin/env bash
# What storing one journal row costs the database, in CPU per row, and what of it
# each part of the row's table and statement costs. The rows are a batch of
# posts': 9 three-leg sales per transaction (a buyer paying the merchant and the
# platform, the merchant paying the platform: 54 entries), committed durably,
#
# - written as the service writes them: one multi-row INSERT, as text;
# - written as the service wrote them before text became quoted literals
#   (`CONVERT(x'...' USING ...)` for the currency and the description);
# - copied from a table that already holds them (INSERT ... SELECT): the same
#   rows with no SQL text of their own, what a row costs below the parser;
#
# into the `entries` table as the migrations make it, and into copies of it
# without its foreign key, without `entries_commit`, without `entries_key`, and
# with the journal's index alone (`entries_account_seq`, beside the primary key).
#
#   scripts/entry-rows.sh
#
# One private MariaDB/MySQL (scripts/lib/private-serve.sh; the service idles):
# the tables are copied from its ledger database into a scratch database beside
# it. Environment: ROUNDS (5), TRANSACTIONS (1000 per measurement), LEDGER_BIN.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${ROUNDS:-5}
txns=${TRANSACTIONS:-1000}
fail() { echo "entry-rows: $*" >&2; exit 1; }

serve_args=(--stream-assigner off)
# shellcheck source=scripts/lib/private-serve.sh
. scripts/lib/private-serve.sh
db_pid=$(pgrep -P "$server" | head -1)
[ -n "$db_pid" ] || fail "no database server under ledger serve"
sql() { mysql -h127.0.0.1 -P"$db_port" -uroot "$@"; }
tick=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$db_pid/stat"; }

tables="entries no_fk no_commit_index no_key_index journal_only"
sql -e "CREATE DATABASE entry_rows" || fail "cannot create the scratch database (needs the mysql client)"
sql entry_rows <<SQL || fail "cannot copy the tables"
CREATE TABLE accounts LIKE $db_name.accounts;
CREATE TABLE staged LIKE $db_name.entries;
CREATE TABLE entries LIKE $db_name.entries;
CREATE TABLE no_fk LIKE $db_name.entries;
CREATE TABLE no_commit_index LIKE $db_name.entries;
CREATE TABLE no_key_index LIKE $db_name.entries;
CREATE TABLE journal_only LIKE $db_name.entries;
ALTER TABLE no_commit_index DROP INDEX entries_commit;
ALTER TABLE no_key_index DROP INDEX entries_key;
ALTER TABLE journal_only DROP INDEX entries_commit, DROP INDEX entries_key;
ALTER TABLE entries ADD FOREIGN KEY (account_id) REFERENCES accounts (account_id);
ALTER TABLE no_commit_index ADD FOREIGN KEY (account_id) REFERENCES accounts (account_id);
ALTER TABLE no_key_index ADD FOREIGN KEY (account_id) REFERENCES accounts (account_id);
SQL
python3 -c '
print("INSERT INTO accounts (account_id, currency, balance, created_at) VALUES "
      + ", ".join(f"({n}, {chr(39)}USD{chr(39)}, 0, UTC_TIMESTAMP(6))" for n in range(1, 10001)) + ";")' \
  | sql entry_rows || fail "cannot open the accounts"

# The statements of each way of writing, one transaction a line; `TABLE` stands
# for the table written.
python3 - "$txns" "$work" <<'PY'
import datetime, random, string, sys
txns, work = int(sys.argv[1]), sys.argv[2]
random.seed(7)
columns = ("entry_id, account_id, account_seq, leg, post_leg, kind, amount, currency, "
           "balance_after, namespace, idempotency_key, description, created_at, "
           "counterparty_account_id, refunded_entry_id, hold_id, commit_id, commit_pos")
seq, entry, at = {}, 1, datetime.datetime(2026, 12, 2, 12, 0, 0)
text, convert, copied = [], [], []
for _ in range(txns):
    rows, old, commit = [], [], entry
    for _ in range(9):
        key = "".join(random.choice(string.ascii_letters + string.digits) for _ in range(36)).encode().hex()
        at += datetime.timedelta(microseconds=37)
        when = at.strftime("'%Y-%m-%d %H:%M:%S.%f'")
        buyer = random.randint(3, 10000)
        for leg, (frm, to, amount) in enumerate([(buyer, 1, 97), (buyer, 2, 3), (1, 2, 1)]):
            for side, (account, other, kind) in enumerate([(frm, to, 3), (to, frm, 4)]):
                seq[account] = seq.get(account, 0) + 1
                head = f"{entry}, {account}, {seq[account]}, {2 * leg + side}, {leg}, {kind}, {amount}, "
                tail = f", 1000, x'', x'{key}', "
                rest = f", {when}, {other}, NULL, NULL, {commit}, {entry - commit}"
                rows.append(f"({head}'USD'{tail}''{rest})")
                old.append(f"({head}CONVERT(x'555344' USING ascii){tail}CONVERT(x'' USING utf8mb4){rest})")
                entry += 1
    text.append(f"BEGIN; INSERT INTO TABLE ({columns}) VALUES {', '.join(rows)}; COMMIT;")
    convert.append(f"BEGIN; INSERT INTO TABLE ({columns}) VALUES {', '.join(old)}; COMMIT;")
    copied.append(f"BEGIN; INSERT INTO TABLE ({columns}) SELECT {columns} FROM staged "
                  f"WHERE entry_id BETWEEN {commit} AND {entry - 1}; COMMIT;")
for name, lines in (("text", text), ("convert", convert), ("copied", copied)):
    open(f"{work}/{name}.sql", "w").write("\n".join(lines) + "\n")
PY
sed 's/INSERT INTO TABLE /INSERT INTO staged /' "$work/text.sql" | sql entry_rows || fail "cannot stage the rows"

results=$work/results.txt
for round in $(seq 1 "$rounds"); do
  for table in $tables; do
    for way in text convert copied; do
      sql entry_rows -e "TRUNCATE TABLE $table"
      before=$(cpu)
      sed "s/INSERT INTO TABLE /INSERT INTO $table /" "$work/$way.sql" | sql entry_rows \
        || fail "$way into $table failed"
      echo "$table $way $(( $(cpu) - before ))" >>"$results"
    done
  done
  echo "round $round of $rounds" >&2
done

python3 - "$results" "$txns" "$tick" "$rounds" "$flavor" "$tables" <<'PY'
import collections, statistics, sys
path, txns, tick, rounds, flavor, tables = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6].split()
per_row = collections.defaultdict(list)
for line in open(path):
    table, way, ticks = line.split()
    per_row[(table, way)].append(int(ticks) / tick * 1e6 / (txns * 54))
def spread(values):
    values = sorted(values)
    return f"{statistics.median(values):.1f} ({values[0]:.1f}-{values[-1]:.1f})"
names = {"entries": "entries (as migrated)", "no_fk": "without the foreign key",
         "no_commit_index": "without entries_commit", "no_key_index": "without entries_key",
         "journal_only": "primary key and entries_account_seq"}
print(f"{flavor}, {txns} transactions of 54 rows, {rounds} rounds; the database's CPU in us per row, median (min-max)")
print(f"{'':<38} {'as written':>20} {'CONVERT, as before':>20} {'copied, no text':>20}")
for table in tables:
    print(f"{names[table]:<38} " + " ".join(f"{spread(per_row[(table, way)]):>20}" for way in ("text", "convert", "copied")))
PY
