#!/bin/bash
# Entrypoint of the image scripts/docker-check.sh makes from Debian's MySQL packages
# and tags mysql:8.4 inside its own Docker daemon, standing in for the official image,
# which that daemon cannot pull. It does what the official entrypoint does for the
# settings docker-compose.yml uses: on an empty data directory, initialize it
# (--initialize-insecure) with an init file that sets root's password for
# 'root'@'localhost' and 'root'@'%' (MYSQL_ROOT_PASSWORD, or none with
# MYSQL_ALLOW_EMPTY_PASSWORD), creates MYSQL_DATABASE and MYSQL_USER with
# MYSQL_PASSWORD, granted that database; then run mysqld as the mysql user. A data
# directory that is already initialized is used as it is.
set -euo pipefail

if [ "${1:0:1}" = - ]; then
  set -- mysqld "$@"
fi
if [ "$1" != mysqld ] || [ "$(id -u)" != 0 ]; then
  exec "$@"
fi

datadir=/var/lib/mysql
mkdir -p "$datadir" /var/run/mysqld /var/lib/mysql-files
chown mysql:mysql "$datadir" /var/run/mysqld /var/lib/mysql-files
chmod 750 /var/lib/mysql-files

# A string as a single-quoted SQL literal.
literal() {
  local v=${1//\\/\\\\}
  printf "'%s'" "${v//\'/\\\'}"
}
identifier() {
  # shellcheck disable=SC2016 # backquotes, not an expansion
  printf '`%s`' "${1//\`/\`\`}"
}

if [ ! -d "$datadir/mysql" ]; then
  if [ -z "${MYSQL_ROOT_PASSWORD:-}" ] && [ -z "${MYSQL_ALLOW_EMPTY_PASSWORD:-}" ]; then
    echo >&2 "mysql-entrypoint: set MYSQL_ROOT_PASSWORD (or MYSQL_ALLOW_EMPTY_PASSWORD)"
    exit 1
  fi
  echo >&2 "mysql-entrypoint: initializing $datadir"
  init=$(mktemp /tmp/mysql-init.XXXXXX.sql)
  pw=$(literal "${MYSQL_ROOT_PASSWORD:-}")
  {
    echo "ALTER USER 'root'@'localhost' IDENTIFIED BY $pw;"
    echo "CREATE USER 'root'@'%' IDENTIFIED BY $pw;"
    echo "GRANT ALL ON *.* TO 'root'@'%' WITH GRANT OPTION;"
    if [ -n "${MYSQL_DATABASE:-}" ]; then
      echo "CREATE DATABASE IF NOT EXISTS $(identifier "$MYSQL_DATABASE");"
    fi
    if [ -n "${MYSQL_USER:-}" ] && [ -n "${MYSQL_PASSWORD:-}" ]; then
      echo "CREATE USER $(literal "$MYSQL_USER")@'%' IDENTIFIED BY $(literal "$MYSQL_PASSWORD");"
      if [ -n "${MYSQL_DATABASE:-}" ]; then
        echo "GRANT ALL ON $(identifier "$MYSQL_DATABASE").* TO $(literal "$MYSQL_USER")@'%';"
      fi
    fi
  } >"$init"
  chown mysql "$init"
  "$@" --initialize-insecure --user=mysql --init-file="$init"
  rm -f "$init"
  echo >&2 "mysql-entrypoint: initialized"
fi

exec "$@" --user=mysql
