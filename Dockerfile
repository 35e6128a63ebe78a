# syntax=docker/dockerfile:1
# Build a static binary, then run it on a small base that has wget for the
# compose health check.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# The context holds no .git, so the build cannot record a revision: stamp
# one, e.g. --build-arg VERSION=$(git describe --always --dirty).
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/subagentd ./cmd/api

FROM alpine:3.22
# An unprivileged user, and a directory of its own to start in: the start
# directory is the default workspace root, the only place a child's cwd
# may lie (mount the agents' workspace here, or set workspaceRoots).
RUN adduser -D -H -u 10001 subagentd && install -d -o subagentd -g subagentd /srv/work
COPY --from=build /out/subagentd /usr/local/bin/subagentd
USER subagentd
WORKDIR /srv/work
EXPOSE 8080
ENV SUBAGENTD_ADDR=0.0.0.0:8080
ENTRYPOINT ["/usr/local/bin/subagentd"]
