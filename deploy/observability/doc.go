// Package observability holds no code: the Grafana dashboards, the
// Prometheus alert rules and scrape configuration, and the OpenTelemetry
// collector configuration of the compose stack's observability profile.
// Its test parses every panel expression and rule with Prometheus's own
// parsers and checks that each metric they name is one aiforge registers,
// as an in-process `aiforge up` reports them.
package observability
