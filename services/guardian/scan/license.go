package scan

import (
	"bufio"
	"bytes"
	"strings"
)

// knownLicenses are the licence ids reported as-is; anything else (including
// "other") needs human review. Being known is not a claim of permissiveness.
var knownLicenses = map[string]bool{
	"apache-2.0": true, "mit": true, "bsd-2-clause": true, "bsd-3-clause": true, "bsd-3-clause-clear": true,
	"isc": true, "unlicense": true, "cc0-1.0": true, "cc-by-4.0": true, "cc-by-3.0": true, "cc-by-sa-4.0": true,
	"cc-by-sa-3.0": true, "cc-by-nc-4.0": true, "cc-by-nc-sa-4.0": true, "cc-by-nd-4.0": true, "cc-by-nc-nd-4.0": true,
	"mpl-2.0": true, "gpl-2.0": true, "gpl-3.0": true, "lgpl-2.1": true, "lgpl-3.0": true, "agpl-3.0": true,
	"afl-3.0": true, "artistic-2.0": true, "bsl-1.0": true, "epl-2.0": true, "odc-by": true, "odbl": true,
	"openrail": true, "openrail++": true, "creativeml-openrail-m": true, "bigscience-openrail-m": true,
	"bigscience-bloom-rail-1.0": true, "bigcode-openrail-m": true, "llama2": true, "llama3": true,
	"llama3.1": true, "llama3.2": true, "llama3.3": true, "llama4": true, "gemma": true, "apple-ascl": true,
	"deepfloyd-if-license": true, "wtfpl": true, "zlib": true, "ecl-2.0": true, "pddl": true, "c-uda": true,
}

// normalizeLicense maps a raw licence value to a known id or "needs-review".
func normalizeLicense(raw string) string {
	id := strings.ToLower(strings.TrimSpace(raw))
	if knownLicenses[id] {
		return id
	}
	return LicenseNeedsReview
}

func unquoteYAML(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 0 && (s[0] == '"' || s[0] == '\'') {
		if end := strings.IndexByte(s[1:], s[0]); end >= 0 {
			return s[1 : end+1]
		}
		return s
	}
	if i := strings.Index(s, " #"); i >= 0 {
		s = strings.TrimSpace(s[:i])
	}
	return s
}

// readmeLicense extracts license, license_name and license_link from a
// README's YAML front matter (a minimal, line-based subset of YAML).
func readmeLicense(data []byte) (license, name, link string) {
	data = bytes.TrimPrefix(data, []byte("\ufeff"))
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	if !sc.Scan() || strings.TrimSpace(sc.Text()) != "---" {
		return "", "", ""
	}
	inLicenseList := false
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		if strings.TrimSpace(line) == "---" || strings.TrimSpace(line) == "..." {
			break
		}
		if inLicenseList {
			t := strings.TrimSpace(line)
			if strings.HasPrefix(t, "- ") {
				if license == "" {
					license = unquoteYAML(t[2:])
				} else {
					// several licences: a human must decide which applies
					license = "other"
				}
				continue
			}
			inLicenseList = false
		}
		if line == "" || line[0] == ' ' || line[0] == '\t' || line[0] == '#' {
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		k = strings.TrimSpace(k)
		v = unquoteYAML(v)
		switch k {
		case "license":
			if v == "" {
				inLicenseList = true
			} else if strings.HasPrefix(v, "[") {
				license = "other"
			} else {
				license = v
			}
		case "license_name":
			name = v
		case "license_link":
			link = v
		}
	}
	return license, name, link
}
