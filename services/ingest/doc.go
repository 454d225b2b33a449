// Package ingest is the document ingestion service: it parses uploaded
// documents (package extract) and splits them into token-bounded chunks
// (package chunk) for the embedder.
package ingest
