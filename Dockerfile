# syntax=docker/dockerfile:1
#
# docker build -t ledger .
# docker run -e LEDGER_DATABASE_URL=mysql://user:pass@db:3306/ledger -p 50051:50051 ledger

FROM rust:1.95-slim-bookworm AS build
WORKDIR /app
# Dependencies in a layer of their own, rebuilt only when the manifests or the
# wire contract change: build a stub crate against the real Cargo.lock first.
COPY Cargo.toml Cargo.lock build.rs ./
COPY proto ./proto
RUN mkdir src \
 && echo 'fn main() {}' > src/main.rs \
 && touch src/lib.rs \
 && cargo build --release --locked \
 && rm -rf src
COPY src ./src
COPY migrations ./migrations
RUN touch src/main.rs src/lib.rs && cargo build --release --locked

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin ledger
COPY --from=build /app/target/release/ledger /usr/local/bin/ledger
USER ledger
ENV LEDGER_LISTEN=0.0.0.0:50051 \
    LEDGER_LOG_FORMAT=json
EXPOSE 50051
HEALTHCHECK --interval=10s --timeout=5s --start-period=40s --retries=3 \
  CMD ["ledger", "healthcheck"]
ENTRYPOINT ["ledger"]
CMD ["serve"]
