package app

import (
	"regexp"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// describingRegisterer is the Registerer every module gets: it registers
// with the process's registry and keeps the descriptor of everything
// registered, so that the names of the metrics the process can export are
// known before any of them has a sample (a vector with no labels used yet
// exports nothing).
type describingRegisterer struct {
	reg *prometheus.Registry

	mu    sync.Mutex
	descs []*prometheus.Desc
}

func (d *describingRegisterer) Register(c prometheus.Collector) error {
	if err := d.reg.Register(c); err != nil {
		return err
	}
	ch := make(chan *prometheus.Desc, 16)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	d.mu.Lock()
	defer d.mu.Unlock()
	for desc := range ch {
		d.descs = append(d.descs, desc)
	}
	return nil
}

func (d *describingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := d.Register(c); err != nil {
			panic(err)
		}
	}
}

func (d *describingRegisterer) Unregister(c prometheus.Collector) bool { return d.reg.Unregister(c) }

// fqName reads a descriptor's metric name from its String form, the only
// place client_golang shows it: Desc{fqName: "name", help: ...}.
var fqName = regexp.MustCompile(`^Desc\{fqName: "([a-zA-Z_:][a-zA-Z0-9_:]*)"`)

// MetricNames lists the names of every metric the process's modules
// registered (sorted, each once): the metrics /metrics can show, whether
// or not they have a sample yet. Histograms and summaries are listed by
// their base name (name_bucket, name_sum and name_count are exported).
func (a *App) MetricNames() []string {
	a.metrics.mu.Lock()
	defer a.metrics.mu.Unlock()
	var out []string
	for _, d := range a.metrics.descs {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			out = append(out, m[1])
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
