# syntax=docker/dockerfile:1
#
# docker build -t ledger .
# docker run -e LEDGER_DATABASE_URL=mysql://user:pass@db:3306/ledger -p 50051:50051 ledger

FROM rust:1.95-slim-bookworm AS build
WORKDIR /app
# Dependencies in a layer of their own, rebuilt only when the manifests, the build
# scripts or the wire contract change: build stub crates of the workspace against the real
# Cargo.lock first. The build scripts (the service's and ledger-proto's) are real,
# so the generated code's own dependencies are built here too.
COPY Cargo.toml Cargo.lock build.rs ./
COPY crates/ledger-proto/Cargo.toml crates/ledger-proto/build.rs ./crates/ledger-proto/
COPY crates/ledger-devtools/Cargo.toml ./crates/ledger-devtools/
COPY crates/ledger-client/Cargo.toml ./crates/ledger-client/
COPY crates/ledgerctl/Cargo.toml ./crates/ledgerctl/
COPY proto ./proto
RUN mkdir -p src crates/ledger-proto/src crates/ledger-devtools/src crates/ledger-client/src crates/ledgerctl/src \
 && echo 'fn main() {}' > src/main.rs \
 && echo 'fn main() {}' > crates/ledgerctl/src/main.rs \
 && touch src/lib.rs crates/ledger-proto/src/lib.rs crates/ledger-devtools/src/lib.rs crates/ledger-client/src/lib.rs \
 && cargo build --release --locked -p ledger -p ledgerctl \
 && rm -rf src crates/ledger-proto/src crates/ledger-devtools/src crates/ledger-client/src crates/ledgerctl/src
COPY src ./src
COPY crates/ledger-proto/src ./crates/ledger-proto/src
COPY crates/ledger-devtools/src ./crates/ledger-devtools/src
COPY crates/ledger-client/src ./crates/ledger-client/src
COPY crates/ledgerctl/src ./crates/ledgerctl/src
COPY migrations ./migrations
# askama.toml tells the console's templates where they live (src/console/templates).
COPY askama.toml ./
# The copies keep the context's times, which may be older than the stubs' build.
RUN touch src/main.rs src/lib.rs crates/ledger-proto/src/lib.rs crates/ledger-devtools/src/lib.rs \
      crates/ledger-client/src/lib.rs crates/ledgerctl/src/main.rs \
 && cargo build --release --locked -p ledger -p ledgerctl

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin ledger
COPY --from=build /app/target/release/ledger /app/target/release/ledgerctl /usr/local/bin/
USER ledger
ENV LEDGER_LISTEN=0.0.0.0:50051 \
    LEDGER_LOG_FORMAT=json
EXPOSE 50051
HEALTHCHECK --interval=10s --timeout=5s --start-period=40s --retries=3 \
  CMD ["ledger", "healthcheck"]
ENTRYPOINT ["ledger"]
CMD ["serve"]
