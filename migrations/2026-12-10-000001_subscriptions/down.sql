DELETE FROM id_blocks WHERE name = 'subscriptions';
DROP TABLE subscriptions;
