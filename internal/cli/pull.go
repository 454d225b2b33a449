package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/aiforge/aiforge/pkg/catalog"
	"github.com/aiforge/aiforge/pkg/ociref"
)

// PullOptions describe a hub pull.
type PullOptions struct {
	Repo      string // org/name
	Revision  string // branch, tag or commit; empty: main
	Name      string // catalog name; empty: the repository
	Kind      string // model (default) or adapter
	BaseModel string // an adapter's base model
}

// PullAnswer is the edge's answer to a pull request.
type PullAnswer struct {
	PullID      string    `json:"pull_id"`
	Name        string    `json:"name"`
	Repo        string    `json:"repo"`
	Revision    string    `json:"revision"`
	RequestedAt time.Time `json:"requested_at"`
}

// RequestPull asks the guardian's mirror to pull a hub repository.
func (c *Client) RequestPull(ctx context.Context, o PullOptions) (PullAnswer, error) {
	in := map[string]any{"repo": o.Repo}
	for k, v := range map[string]string{"revision": o.Revision, "name": o.Name, "kind": o.Kind, "base_model": o.BaseModel} {
		if v != "" {
			in[k] = v
		}
	}
	var ans PullAnswer
	err := c.Do(ctx, "POST", "/admin/v1/catalog/pulls", in, &ans)
	return ans, err
}

// PullRef is how a pull's source reads: ORG/REPO@REVISION, or the OCI
// reference.
func PullRef(repo, revision string) string {
	if ociref.IsOCI(repo) {
		return ociref.Join(repo, revision)
	}
	return repo + "@" + revision
}

// FollowPull follows a requested pull to its verdict: it waits for the pull's
// catalog version (created, or already mirrored from the same commit), says
// which on out, reports the download through progress (made on first use
// with the total bytes; nil for none) and waits for the guardian's verdict.
// A pull that failed before it had a version returns an error.
func (c *Client) FollowPull(ctx context.Context, ans PullAnswer, out io.Writer, progress func(total int64) *Progress) (catalog.Pull, catalog.Version, error) {
	p, err := c.WaitPull(ctx, ans.PullID, 500*time.Millisecond)
	if err != nil {
		return p, catalog.Version{}, err
	}
	if p.Status == catalog.PullFailed && p.Version == 0 {
		msg := "unknown reason"
		if p.Reason != nil {
			msg = p.Reason.Code + ": " + p.Reason.Message
		}
		return p, catalog.Version{}, fmt.Errorf("pull %s failed: %s", p.ID, msg)
	}
	pin := "commit"
	if ociref.IsOCI(ans.Repo) {
		pin = "digest"
	}
	switch {
	case p.Skipped:
		fmt.Fprintf(out, "%s is %s %s, already mirrored as %s version %d: nothing downloaded\n", PullRef(ans.Repo, ans.Revision), pin, p.Commit, ans.Name, p.Version)
	case p.Commit != "":
		fmt.Fprintf(out, "%s is %s %s: mirroring into %s version %d\n", PullRef(ans.Repo, ans.Revision), pin, p.Commit, ans.Name, p.Version)
	}
	var bar *Progress
	each := func(v catalog.Version) {
		if progress == nil || v.Progress == nil || v.Progress.BytesTotal == 0 {
			return
		}
		if bar == nil {
			bar = progress(v.Progress.BytesTotal)
		}
		if d := v.Progress.BytesDone - bar.Done(); d > 0 {
			bar.Add(d)
		}
	}
	v, err := c.WaitVersion(ctx, ans.Name, p.Version, time.Second, nil, each)
	if bar != nil {
		bar.Finish()
	}
	return p, v, err
}
