package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/aiforge/aiforge/services/ingest"
)

// parseCmd is the hidden subcommand the ingest service starts for each
// untrusted file: it reads the file on stdin, parses and chunks it under the
// limits handed down in its environment (ingest.ServeParse) and writes the
// chunks on stdout.
func parseCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "__parse",
		Short:  "parse one document for the ingest service (internal)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return ingest.ServeParse(cmd.Context(), os.Stdin, os.Stdout)
		},
	}
}

// parserCommand is the command line that runs this binary's parseCmd, or
// nil when the binary cannot be found (ingest then parses in process).
// parser is the ingest parser child's command line, set in main only: a
// test binary cannot be re-executed as the parser, so tests parse in
// process.
var parser []string

func parserCommand() []string {
	exe, err := os.Executable()
	if err != nil {
		return nil
	}
	return []string{exe, "__parse"}
}
