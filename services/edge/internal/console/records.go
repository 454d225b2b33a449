package console

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aiforge/aiforge/pkg/batch"
	"github.com/aiforge/aiforge/pkg/events"
	"github.com/aiforge/aiforge/pkg/kv"
	"github.com/aiforge/aiforge/pkg/sandbox"
	"github.com/aiforge/aiforge/pkg/vectorstore"
	"github.com/aiforge/aiforge/services/edge/internal/vectorstores"
)

// maxListed bounds the records a page lists (newest first); the page says
// how many there are in all.
const maxListed = 200

var errUnavailable = errors.New("this edge was started without the bucket this page reads")

type batchesData struct {
	Batches []batch.Record
	Total   int
}

// Done is the lines finished, answered or failed.
func batchDone(b batch.Record) int64 { return b.RequestCounts.Completed + b.RequestCounts.Failed }

func (s *Service) batchesPage(r *http.Request) (string, any, error) {
	if s.d.Batches == nil {
		return "batches", batchesData{}, errUnavailable
	}
	ctx, cancel := pageCtx(r)
	defer cancel()
	es, err := kv.List[batch.Record](ctx, s.d.Batches, batch.AllBatches)
	if err != nil {
		return "batches", batchesData{}, err
	}
	bs := kv.Values(es)
	slices.SortFunc(bs, func(a, b batch.Record) int {
		return cmp.Or(cmp.Compare(b.CreatedAt, a.CreatedAt), strings.Compare(b.ID, a.ID))
	})
	d := batchesData{Total: len(bs)}
	d.Batches = bs[:min(len(bs), maxListed)]
	return "batches", d, nil
}

// storeView is a vector store with its files.
type storeView struct {
	Tenant string
	vectorstores.VectorStore
	Files []vectorstore.FileRecord
	// Counts are by status.
	Completed, InProgress, Failed, Cancelled int
}

type storesData struct {
	Stores []storeView
	Total  int
}

// maxFilesShown bounds the files listed under one store.
const maxFilesShown = 100

func (s *Service) vectorStoresPage(r *http.Request) (string, any, error) {
	if s.d.VectorStores == nil || s.d.VectorStoreFiles == nil {
		return "vectorstores", storesData{}, errUnavailable
	}
	ctx, cancel := pageCtx(r)
	defer cancel()
	es, err := kv.List[vectorstores.VectorStore](ctx, s.d.VectorStores)
	if err != nil {
		return "vectorstores", storesData{}, err
	}
	fs, err := kv.List[vectorstore.FileRecord](ctx, s.d.VectorStoreFiles)
	if err != nil {
		return "vectorstores", storesData{}, err
	}
	byStore := map[string][]vectorstore.FileRecord{}
	for _, f := range fs {
		// tenant.store.file
		if i := strings.LastIndexByte(f.Key, '.'); i > 0 {
			byStore[f.Key[:i]] = append(byStore[f.Key[:i]], f.Value)
		}
	}
	d := storesData{Total: len(es)}
	for _, e := range es {
		tenant, _, _ := strings.Cut(e.Key, ".")
		v := storeView{Tenant: tenant, VectorStore: e.Value}
		for _, f := range byStore[e.Key] {
			switch f.Status {
			case vectorstore.StatusCompleted:
				v.Completed++
			case vectorstore.StatusInProgress:
				v.InProgress++
			case vectorstore.StatusFailed:
				v.Failed++
			case vectorstore.StatusCancelled:
				v.Cancelled++
			}
		}
		files := byStore[e.Key]
		slices.SortFunc(files, func(a, b vectorstore.FileRecord) int { return cmp.Compare(b.CreatedAt, a.CreatedAt) })
		v.Files = files[:min(len(files), maxFilesShown)]
		d.Stores = append(d.Stores, v)
	}
	slices.SortFunc(d.Stores, func(a, b storeView) int {
		return cmp.Or(cmp.Compare(b.CreatedAt, a.CreatedAt), strings.Compare(a.ID, b.ID))
	})
	d.Stores = d.Stores[:min(len(d.Stores), maxListed)]
	return "vectorstores", d, nil
}

type sandboxesData struct {
	Containers []sandbox.Record
	Total      int
}

func (s *Service) sandboxesPage(r *http.Request) (string, any, error) {
	if s.d.Containers == nil {
		return "sandboxes", sandboxesData{}, errUnavailable
	}
	ctx, cancel := pageCtx(r)
	defer cancel()
	es, err := kv.List[sandbox.Record](ctx, s.d.Containers)
	if err != nil {
		return "sandboxes", sandboxesData{}, err
	}
	cs := kv.Values(es)
	slices.SortFunc(cs, func(a, b sandbox.Record) int {
		return cmp.Or(cmp.Compare(b.CreatedAt, a.CreatedAt), strings.Compare(a.ID, b.ID))
	})
	return "sandboxes", sandboxesData{Containers: cs[:min(len(cs), maxListed)], Total: len(cs)}, nil
}

// deadLetter is one message a consumer gave up on.
type deadLetter struct {
	Seq        uint64
	Time       time.Time
	Subject    string
	Stream     string
	OrigSeq    string
	Consumer   string
	Deliveries string
	Reason     string
	Type       string
	Tenant     string
	// Data is the start of the message, as text.
	Data string
}

type deadLettersData struct {
	Letters []deadLetter
	// Total is the messages in the stream.
	Total uint64
}

// Dead-letter bounds: the newest maxDeadLetters are shown, at most
// maxDeadLetterData bytes of each.
const (
	maxDeadLetters    = 50
	maxDeadLetterData = 512
)

func (s *Service) deadLettersPage(r *http.Request) (string, any, error) {
	if s.d.JS == nil {
		return "deadletters", deadLettersData{}, errUnavailable
	}
	ctx, cancel := pageCtx(r)
	defer cancel()
	d, err := readDeadLetters(ctx, s.d.JS, maxDeadLetters)
	return "deadletters", d, err
}

// readDeadLetters reads the newest n messages of the dead-letter stream,
// newest first, by sequence: no consumer is created, and at most 4n
// sequences are tried (deleted ones are skipped).
func readDeadLetters(ctx context.Context, js jetstream.JetStream, n int) (deadLettersData, error) {
	st, err := js.Stream(ctx, events.StreamDeadLetter)
	if err != nil {
		return deadLettersData{}, err
	}
	info := st.CachedInfo()
	d := deadLettersData{Total: info.State.Msgs}
	tries := 4 * n
	for seq := info.State.LastSeq; seq >= info.State.FirstSeq && seq > 0 && len(d.Letters) < n && tries > 0; seq-- {
		tries--
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return d, err
		}
		h := m.Header
		d.Letters = append(d.Letters, deadLetter{
			Seq: m.Sequence, Time: m.Time, Subject: h.Get(events.HeaderDLQSubject), Stream: h.Get(events.HeaderDLQStream),
			OrigSeq: h.Get(events.HeaderDLQSequence), Consumer: h.Get(events.HeaderDLQConsumer), Deliveries: h.Get(events.HeaderDLQDeliveries),
			Reason: h.Get(events.HeaderDLQReason), Type: h.Get(events.HeaderType), Tenant: h.Get(events.HeaderTenant),
			Data: preview(m.Data, maxDeadLetterData),
		})
	}
	return d, nil
}

// preview is the start of b as text, invalid UTF-8 replaced.
func preview(b []byte, n int) string {
	cut := len(b) > n
	if cut {
		b = b[:n]
	}
	s := strings.ToValidUTF8(string(b), "\uFFFD")
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	if cut {
		s += "... (" + strconv.Itoa(n) + " bytes shown)"
	}
	return s
}
