package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/spf13/cobra"
)

// natsLeadersCmd prints who leads the JetStream meta group and the named
// streams, and how current their other peers are, from one nats-server's
// monitoring endpoint (/jsz): what deploy/chaos.sh kills and waits for.
func natsLeadersCmd() *cobra.Command {
	var monitor string
	var streams []string
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "leaders",
		Short: "Print the JetStream meta leader and each stream's leader, with their peers' state, from a node's /jsz",
		Long: `Reads --monitor's /jsz (nats-server's monitoring port; in the compose stack it listens on each node's
loopback, so run it in a node: docker exec <nats-N> /aiforge nats leaders) and prints one line per group:

  meta nats-2 nats-1:current nats-3:current
  USAGE nats-1 nats-2:current nats-3:offline

the group, its leader ("-" while it has none), then every other peer as name:current, name:lagging or
name:offline, as this node sees them. The account's streams named by --stream come after meta.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			info, err := fetchJsz(ctx, monitor)
			if err != nil {
				return err
			}
			for _, l := range leaderLines(info, streams) {
				fmt.Fprintln(cmd.OutOrStdout(), l)
			}
			return nil
		},
	}
	c.Flags().StringVar(&monitor, "monitor", "http://127.0.0.1:8222", "the nats-server monitoring base URL")
	c.Flags().StringSliceVar(&streams, "stream", []string{"USAGE", "DOCS"}, "streams to report (repeat or comma-separate)")
	c.Flags().DurationVar(&timeout, "timeout", 3*time.Second, "how long the request may take")
	return c
}

func fetchJsz(ctx context.Context, monitor string) (*server.JSInfo, error) {
	u, err := url.Parse(strings.TrimRight(monitor, "/") + "/jsz?accounts=true&streams=true")
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("nats leaders: --monitor %q is not an http(s) URL", monitor)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("nats leaders: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("nats leaders: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("nats leaders: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("nats leaders: %s answered %s", u.Redacted(), resp.Status)
	}
	var info server.JSInfo
	if err := json.Unmarshal(body, &info); err != nil {
		return nil, fmt.Errorf("nats leaders: /jsz: %w", err)
	}
	return &info, nil
}

// leaderLines formats the meta group and the named streams (in the order
// asked; a stream this node does not know is printed with leader "?").
func leaderLines(info *server.JSInfo, streams []string) []string {
	line := func(group, leader string, peers []*server.PeerInfo) string {
		if leader == "" {
			leader = "-"
		}
		parts := []string{group, leader}
		for _, p := range peers {
			if p == nil || p.Name == leader {
				continue
			}
			state := "lagging"
			switch {
			case p.Offline:
				state = "offline"
			case p.Current:
				state = "current"
			}
			parts = append(parts, p.Name+":"+state)
		}
		return strings.Join(parts, " ")
	}
	var out []string
	if m := info.Meta; m != nil {
		out = append(out, line("meta", m.Leader, m.Replicas))
	} else {
		out = append(out, "meta ?")
	}
	for _, name := range streams {
		found := false
		for _, acc := range info.AccountDetails {
			i := slices.IndexFunc(acc.Streams, func(s server.StreamDetail) bool { return s.Name == name })
			if i < 0 {
				continue
			}
			found = true
			if cl := acc.Streams[i].Cluster; cl != nil {
				out = append(out, line(name, cl.Leader, cl.Replicas))
			} else {
				out = append(out, name+" -")
			}
			break
		}
		if !found {
			out = append(out, name+" ?")
		}
	}
	return out
}
