// Package query holds the synchronous request/reply contracts on the bus:
// what a client sends on events.UsageQuery and events.RetrieverQuery, and
// what the usage service and the retriever answer. The edge asks, the
// services answer; both sides use these types, so the wire shape is
// defined once.
package query
