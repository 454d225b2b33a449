// Package scan is a fail-closed model file scanner. It never deserialises
// code-bearing formats (pickle, zip archives, Keras/HDF5, Python); it refuses
// them by content sniffing and fully validates safetensors (and GGUF
// structurally). Any error during a scan is a rejection.
package scan

import (
	"bytes"
	"encoding/binary"
	"path"
	"regexp"
	"strings"
	"unicode/utf8"
)

// Reason is a stable, machine-readable rejection cause.
type Reason struct {
	Code    string
	File    string
	Message string
}

// FileReport describes one scanned file.
type FileReport struct {
	Path    string
	Size    int64
	SHA256  string
	Format  string // safetensors, gguf, sentencepiece, image, json, text, empty, pickle, zip, keras, python, unknown
	Tensors int
	Params  int64
	DTypes  map[string]int64 // params per dtype
	License string
	// LicenseName and LicenseLink come from a model card's front matter
	// (license_name, license_link): what a reviewer of "other" reads.
	LicenseName string
	LicenseLink string
	// ChatTemplate is the chat template the file carries (tokenizer
	// config's chat_template, GGUF tokenizer.chat_template), as text.
	ChatTemplate string
}

// Verdict is the outcome of scanning a whole upload.
type Verdict struct {
	Accepted bool
	Reasons  []Reason
	Files    []FileReport
	License  string // spdx-ish id, or "needs-review"
	// LicenseName and LicenseLink are the model card's license_name and
	// license_link, for the reviewer of a licence that needs review.
	LicenseName string
	LicenseLink string
	Params      int64
	// Format is the weight format of the upload: "safetensors" or "gguf";
	// empty when it holds no valid weight file. Params and DTypes count the
	// weights of this format only.
	Format string
	DTypes map[string]int64 // params per dtype, summed over the weight files
	// BaseModel is an adapter's base_model_name_or_path, for information
	// only (Kind "adapter"); the catalog decides what it binds to.
	BaseModel string
	// ChatTemplate is the upload's chat template (tokenizer_config.json's
	// chat_template, else a GGUF's tokenizer.chat_template), kept as text
	// for review: aiforge never renders it. Longer than MaxChatTemplate it
	// is cut there, with ChatTemplateTruncated set.
	ChatTemplate          string
	ChatTemplateTruncated bool
}

// MaxChatTemplate bounds the chat template text a verdict carries.
const MaxChatTemplate = 64 << 10

// Stable reason codes.
const (
	CodeSTHeaderTooLarge   = "safetensors_header_too_large"
	CodeSTHeaderInvalid    = "safetensors_header_invalid"
	CodeSTDuplicateKey     = "safetensors_duplicate_key"
	CodeSTBadDType         = "safetensors_bad_dtype"
	CodeSTShape            = "safetensors_shape"
	CodeSTOffsets          = "safetensors_offsets"
	CodeSTOverflow         = "safetensors_overflow"
	CodeSTMetadata         = "safetensors_metadata"
	CodeSTName             = "safetensors_name"
	CodePickle             = "code_bearing_pickle"
	CodeZip                = "code_bearing_zip"
	CodeZipTraversal       = "zip_path_traversal"
	CodeKeras              = "code_bearing_keras"
	CodePython             = "code_bearing_python"
	CodeGGUF               = "gguf_invalid"
	CodeHashMismatch       = "hash_mismatch"
	CodeShardIndex         = "shard_index_invalid"
	CodeShardDuplicate     = "shard_duplicate_tensor"
	CodeReadError          = "read_error"
	CodeUnknownFormat      = "unknown_format"
	CodeJSONInvalid        = "json_invalid"
	CodeEmptyUpload        = "empty_upload"
	CodeSentencePiece      = "sentencepiece_invalid"
	CodeAdapter            = "adapter_invalid"
	CodeKind               = "kind_unknown"
	LicenseNeedsReview     = "needs-review"
	maxSafetensorsHeader   = 100 << 20
	sniffHeadLen           = 4096
	maxSmallFileForParsing = 64 << 20
)

var (
	hdf5Magic = []byte("\x89HDF\r\n\x1a\n")
	// protocol-0/1 pickle GLOBAL opcode: c<module>\n<name>\n
	// followed by a typical next opcode (MARK, EMPTY_TUPLE, REDUCE, PUT, BINPUT).
	pickleGlobal = regexp.MustCompile(`(?:^|[\n(.)R])[ci][A-Za-z_][\w.]*\n[A-Za-z_][\w.]*\n(?:\(|\)|R|p\d+\n|q)`)
	// names that only ever hold serialised objects; text content under them
	// is treated as a (protocol 0) pickle.
	pickleNames = []string{".pkl", ".pickle", ".pt", ".pth", ".bin", ".ckpt", ".joblib", ".dill", ".npy", ".npz", ".h5", ".hdf5", ".keras"}
)

// Sniff classifies a file by its content first, then by name. head is the
// first bytes of the file (at least 16 recommended; more improves text
// detection). Anything not clearly safetensors/GGUF/JSON/UTF-8 text is given
// a refused format ("pickle", "zip", "keras", "python" or "unknown").
func Sniff(name string, head []byte) string {
	named := nameFormat(name)
	if len(head) == 0 {
		if named == "" || named == "pickle" {
			return "empty"
		}
		// the weight and tokenizer validators reject an empty file; an empty
		// .py is still refused as code
		return named
	}
	if isImage(head) {
		// A loader picks files by name: torch.load would read an image under
		// a pickle name as a pickle (GIF's 'G' is a pickle opcode).
		if named != "" {
			return named
		}
		return "image"
	}
	switch {
	case head[0] == 0x80: // PROTO opcode (protocol >= 2) or anything else non-UTF-8
		return "pickle"
	case bytes.HasPrefix(head, []byte("PK\x03\x04")), bytes.HasPrefix(head, []byte("PK\x05\x06")),
		bytes.HasPrefix(head, []byte("PK\x07\x08")):
		return "zip"
	case bytes.HasPrefix(head, hdf5Magic):
		return "keras"
	case bytes.HasPrefix(head, []byte("GGUF")):
		return "gguf"
	}
	if len(head) >= 9 && head[8] == '{' {
		n := binary.LittleEndian.Uint64(head[:8])
		if n > 0 && n < 1<<40 {
			return "safetensors"
		}
	}
	if !isText(head) {
		if pickleGlobal.Match(head) { // protocol 1: binary opcodes around a GLOBAL
			return "pickle"
		}
		if named != "" && named != "python" {
			// a candidate only: the format's validator decides
			return named
		}
		return "unknown"
	}
	if looksLikePickleText(head) {
		return "pickle"
	}
	if named != "" {
		return named
	}
	t := bytes.TrimLeft(head, " \t\r\n\ufeff")
	if len(t) > 0 && (t[0] == '{' || t[0] == '[') {
		return "json"
	}
	return "text"
}

// nameFormat is the format a file's name commits it to: loaders choose
// files by name, so a file under such a name is validated (or refused) as
// that format whatever its content looks like. Empty when the name is
// neutral.
func nameFormat(name string) string {
	lower := strings.ToLower(path.Base(name))
	switch {
	case strings.HasSuffix(lower, ".safetensors"):
		return "safetensors"
	case strings.HasSuffix(lower, ".gguf"):
		return "gguf"
	case isSentencePieceName(lower):
		return "sentencepiece"
	case hasPickleName(lower):
		return "pickle"
	case strings.HasSuffix(lower, ".py"), strings.HasSuffix(lower, ".pyw"), strings.HasSuffix(lower, ".pyi"):
		return "python"
	}
	return ""
}

func hasPickleName(name string) bool {
	lower := strings.ToLower(path.Base(name))
	for _, ext := range pickleNames {
		if strings.HasSuffix(lower, ext) {
			return true
		}
	}
	return false
}

// isImage recognises PNG, JPEG, GIF and WebP by their magic bytes. Images
// are never decoded; they are inert data in model cards.
func isImage(head []byte) bool {
	switch {
	case bytes.HasPrefix(head, []byte("\x89PNG\r\n\x1a\n")),
		bytes.HasPrefix(head, []byte("\xff\xd8\xff")),
		bytes.HasPrefix(head, []byte("GIF87a")), bytes.HasPrefix(head, []byte("GIF89a")):
		return true
	case len(head) >= 12 && bytes.HasPrefix(head, []byte("RIFF")) && string(head[8:12]) == "WEBP":
		return true
	}
	return false
}

// isSentencePieceName reports whether name is a SentencePiece model file
// name: *.model (tokenizer.model, spiece.model, sentencepiece.bpe.model).
func isSentencePieceName(name string) bool {
	base := strings.ToLower(path.Base(name))
	return strings.HasSuffix(base, ".model") && len(base) > len(".model")
}

// isText reports whether head is UTF-8 text without NULs or unusual control
// characters. A truncated final rune is tolerated.
func isText(head []byte) bool {
	b := head
	// tolerate a rune cut off by the head limit
	for i := 0; i < 3 && len(b) > 0 && !utf8.Valid(b); i++ {
		b = b[:len(b)-1]
	}
	if !utf8.Valid(b) {
		return false
	}
	for _, c := range b {
		if c < 0x20 && c != '\t' && c != '\n' && c != '\r' && c != '\f' {
			return false
		}
		if c == 0x7f {
			return false
		}
	}
	return true
}

// looksLikePickleText detects protocol 0 pickles, which are ASCII.
func looksLikePickleText(head []byte) bool {
	if pickleGlobal.Match(head) {
		return true
	}
	t := bytes.TrimSpace(head)
	if len(t) >= 2 && (t[0] == '(' || t[0] == ']' || t[0] == '}' || t[0] == ')') && t[len(t)-1] == '.' {
		first, _, _ := bytes.Cut(t, []byte("\n"))
		return !bytes.Contains(first, []byte(" "))
	}
	return false
}
