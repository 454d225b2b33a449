package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/aiforge/aiforge/internal/cli"
	"github.com/aiforge/aiforge/pkg/registry"
)

// modelStatusOut is an admin model binding with its replicas' status.
type modelStatusOut struct {
	Name   string `json:"name"`
	Engine struct {
		Model  string `json:"model"`
		APIKey string `json:"api_key,omitempty"`
	} `json:"engine"`
	Status struct {
		State    string                 `json:"state"`
		Servable int                    `json:"servable_replicas"`
		Replicas []registry.WorkerState `json:"replicas"`
	} `json:"status"`
}

func modelsStatusCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "status [NAME]",
		Short: "Show each model's worker replicas: engine state, verified upstream and key, slots, last error",
		Long: `Show what every worker replica of a model reports: its state (serving, unreachable,
unauthorized: the engine refuses the engine key, misnamed: the engine does not serve the
upstream model, unhealthy, starting, draining), whether the upstream model and the engine key
were verified, its slots (in use/queued/max, and where max came from), the engine's context
window, and its last error. A model no replica reports on is "unknown".`,
		Example: "  aiforge models status\n  aiforge models status chat-small --json",
		Args:    cobra.MaximumNArgs(1),
	}
	asJSON := jsonFlag(c)
	c.RunE = func(cmd *cobra.Command, args []string) error {
		cl, err := adminClient(cmd)
		if err != nil {
			return err
		}
		var ms []modelStatusOut
		if len(args) == 1 {
			var m modelStatusOut
			if err := cl.Do(cmd.Context(), "GET", "/admin/v1/models/"+escapeName(args[0]), nil, &m); err != nil {
				return err
			}
			ms = []modelStatusOut{m}
		} else {
			var out listOut[modelStatusOut]
			if err := cl.Do(cmd.Context(), "GET", "/admin/v1/models", nil, &out); err != nil {
				return err
			}
			ms = out.Data
		}
		if *asJSON {
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			if len(args) == 1 {
				return enc.Encode(ms[0])
			}
			return enc.Encode(ms)
		}
		cli.Table(cmd.OutOrStdout(), []string{"MODEL", "STATE", "WORKER", "ENGINE", "REPLICA", "UPSTREAM", "KEY", "SLOTS", "CONTEXT", "UPDATED", "LAST ERROR"},
			statusRows(ms, time.Now()))
		return nil
	}
	return c
}

// escapeName escapes each segment of a model name that holds slashes.
func escapeName(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return strings.Join(parts, "/")
}

func statusRows(ms []modelStatusOut, now time.Time) [][]string {
	rows := [][]string{}
	for _, m := range ms {
		if len(m.Status.Replicas) == 0 {
			rows = append(rows, []string{m.Name, m.Status.State, "-", "-", "-", m.Engine.Model, keyCell(m, nil), "-", "-", "-", "no worker reports on this model"})
			continue
		}
		for _, r := range m.Status.Replicas {
			upstream := r.UpstreamModel + " (unverified)"
			if r.UpstreamVerified {
				upstream = r.UpstreamModel + " (verified)"
			}
			engineID := r.EngineID
			if engineID == "" {
				engineID = "-"
			}
			slots := "-"
			if r.MaxConcurrency > 0 {
				slots = fmt.Sprintf("%d/%d/%d (%s)", r.InFlight, r.Queued, r.MaxConcurrency, r.MaxConcurrencyFrom)
			}
			ctxWin := "-"
			if r.ContextWindow > 0 {
				ctxWin = fmt.Sprint(r.ContextWindow)
			}
			lastErr := "-"
			if r.LastError != "" {
				// The worker names the model first; the row does already.
				lastErr = strings.TrimPrefix(r.LastError, "worker "+r.Model+": ")
				if !r.LastErrorAt.IsZero() {
					lastErr += " (" + ago(now, r.LastErrorAt) + ")"
				}
			}
			replica := r.State
			if p := r.Process; p != nil && r.State == registry.WorkerServing && p.State == registry.ProcessAsleep {
				replica += " (engine asleep)" // scaled to zero: the next request wakes it
			}
			rows = append(rows, []string{m.Name, m.Status.State, r.WorkerID, engineID, replica, upstream, keyCell(m, &r),
				slots, ctxWin, ago(now, r.UpdatedAt), lastErr})
		}
	}
	return rows
}

// keyCell says whether the binding has an engine key and whether the
// replica's engine accepted it.
func keyCell(m modelStatusOut, r *registry.WorkerState) string {
	switch {
	case m.Engine.APIKey == "":
		return "none"
	case r == nil:
		return "set"
	case r.KeyVerified:
		return "verified"
	case r.State == registry.WorkerUnauthorized:
		return "refused"
	default:
		return "unverified"
	}
}

// ago is how long before now t was, rounded for reading.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	switch {
	case d < time.Second:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	default:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
}

// waitServing polls the model's status until a replica serves (nil), a
// replica reports a binding that cannot work (unauthorized, misnamed: an
// error naming it), or wait passes (an error with the last error seen: an
// unreachable engine may still be loading).
func waitServing(cmd *cobra.Command, cl *cli.Client, name string, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(cmd.Context(), wait)
	defer cancel()
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	why := func(m modelStatusOut) string {
		for _, r := range m.Status.Replicas {
			if r.LastError != "" {
				return ": " + strings.TrimPrefix(r.LastError, "worker "+r.Model+": ")
			}
		}
		return ""
	}
	var m modelStatusOut
	for {
		var got modelStatusOut
		err := cl.Do(ctx, "GET", "/admin/v1/models/"+escapeName(name), nil, &got)
		switch {
		case err == nil:
			m = got
		case ctx.Err() == nil:
			return err
		}
		if m.Status.Servable > 0 {
			return nil
		}
		if s := m.Status.State; s == registry.WorkerUnauthorized || s == registry.WorkerMisnamed {
			return fmt.Errorf("model %s is %s%s", name, s, why(m))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("model %s: no replica serves it after %s (state %s)%s", name, wait, m.Status.State, why(m))
		case <-t.C:
		}
	}
}
