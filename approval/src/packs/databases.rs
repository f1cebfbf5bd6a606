//! The `databases` pack: destructive statements through database clients, and commands
//! that wipe data stores.

use super::{RuleSpec, Severity, command, command_unless};

use Severity::Dangerous;

/// SQL that removes data or structure.
const DESTRUCTIVE_SQL: &str = r"\bdrop\s+(?:table|database|schema|index|view|user|role|keyspace|collection|materialized\s+view|function|trigger|owned)\b|\btruncate\s+(?:table\s+)?\w|\balter\s+table\s+\S+\s+drop\b|\bdelete\s+from\s+\S+\s*(?:;|$|'|\x22)|\bdelete\s+from\s+\w+\s*$|\bupdate\s+\S+\s+set\s+[^;]*?(?:;|$)(?:\s|$)";

pub const RULES: &[RuleSpec] = &[
    command_unless(
        "sql-destructive",
        Dangerous,
        "destructive SQL: DROP, TRUNCATE, or DELETE/UPDATE without WHERE",
        &[
            "psql",
            "mysql",
            "mariadb",
            "sqlite3",
            "sqlite",
            "sqlcmd",
            "clickhouse-client",
            "clickhouse",
            "cqlsh",
            "duckdb",
            "snowsql",
            "bq",
            "cockroach",
            "trino",
            "presto",
            "spark-sql",
            "beeline",
            "usql",
            "pgcli",
            "mycli",
            "litecli",
            "mssql-cli",
            "isql",
            "sqlplus",
            "db2",
            "hive",
        ],
        DESTRUCTIVE_SQL,
        r"(?i)\bwhere\b",
        &[
            "psql -c 'DROP TABLE users'",
            "psql -c 'DROP SCHEMA public CASCADE'",
            "mysql -e \"drop database prod\"",
            "sqlite3 app.db 'TRUNCATE TABLE logs'",
            "psql -c 'DELETE FROM users'",
            "sqlite3 db 'delete from sessions;'",
            "psql <<'SQL'\nDROP TABLE orders;\nSQL",
            "echo 'drop table x' | psql",
        ],
        &[
            "psql -c \"DELETE FROM users WHERE id = 3\"",
            "psql -c 'SELECT * FROM drops'",
            "mysql -e 'show tables'",
            "grep -i 'drop table' migrations/",
        ],
    ),
    command(
        "database-drop",
        Dangerous,
        "dropping a whole database or role",
        &["dropdb", "dropuser"],
        r".",
        &["dropdb prod", "dropuser app"],
        &["createdb test"],
    ),
    command(
        "database-drop-command",
        Dangerous,
        "dropping or emptying a database through its client",
        &["mysqladmin", "mongo", "mongosh", "influx"],
        r"(?:^|\s)drop(?:\s|$)|dropDatabase|\.drop\(\)|deleteMany\(\s*\{\s*\}\s*\)|remove\(\s*\{\s*\}\s*\)|(?:^|\s)delete(?:\s|$)",
        &[
            "mysqladmin -u root drop shop",
            "mongosh --eval 'db.dropDatabase()'",
            "mongo app --eval 'db.users.deleteMany({})'",
        ],
        &[
            "mongosh --eval 'db.users.find()'",
            "mysqladmin status -u root -p",
            "mongosh mydb",
        ],
    ),
    command(
        "redis-flush",
        Dangerous,
        "wiping a Redis or Memcached store",
        &["redis-cli", "valkey-cli", "keydb-cli", "dragonfly-cli"],
        r"(?i)(?:^|\s)(?:flushall|flushdb|shutdown|config\s+set|debug\s+(?:segfault|sleep)|script\s+flush|function\s+flush|--flush)(?:\s|$)",
        &[
            "redis-cli FLUSHALL",
            "redis-cli -n 3 FLUSHDB",
            "redis-cli -h prod shutdown",
            "redis-cli CONFIG SET dir /tmp",
        ],
        &["redis-cli ping", "redis-cli get key", "redis-cli info"],
    ),
    command(
        "http-delete",
        Dangerous,
        "an HTTP DELETE request (deleting an index, a bucket or a record through an API)",
        &["curl", "http", "https", "xh", "httpie", "wget"],
        r"(?:^|\s)(?:-X\s*|--request[=\s]|--method[=\s])DELETE\b|^(?:-\S+\s+)*DELETE\s|_delete_by_query|/doDelete\b|/delete-batch\b|/delete_series\b|/_close\b|(?:-X\s*|--request[=\s]|^)PUT\s.*/_cluster/settings",
        &[
            "curl -X DELETE http://localhost:9200/logs-2024",
            "curl -X PUT http://localhost:9200/_cluster/settings",
            "curl -XDELETE 'es:9200/index'",
            "http DELETE api.example.com/users/1",
            "curl -X POST es:9200/idx/_delete_by_query -d '{\"query\":{\"match_all\":{}}}'",
        ],
        &[
            "curl http://localhost:9200/_cat/indices",
            "curl -X POST http://api/items -d '{}'",
        ],
    ),
    command(
        "kv-store-delete",
        Dangerous,
        "deleting keys in bulk from etcd, Consul or ZooKeeper",
        &["etcdctl", "zkcli", "zkCli.sh", "zookeeper-shell"],
        r"(?:^|\s)(?:del|delete|rmr|deleteall|defrag|snapshot\s+restore)(?:\s|$)",
        &["etcdctl del --prefix /", "etcdctl del \"\" --from-key=true"],
        &["etcdctl get /app/config", "etcdctl member list"],
    ),
    command(
        "database-restore-over",
        Dangerous,
        "restoring a dump over an existing database",
        &["pg_restore", "mongorestore"],
        r"(?:^|\s)(?:--clean|-c|--drop)(?:\s|$)",
        &[
            "pg_restore --clean -d prod dump.sql",
            "mongorestore --drop dump/",
        ],
        &["pg_restore -l dump", "mongorestore --dryRun dump/"],
    ),
];
