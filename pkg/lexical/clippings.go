package lexical

import (
	"iter"
	"slices"
	"strings"
	"sync"
)

// Clippings and abbreviations: users ask in the short forms of everyday
// technical English ("which distro", "an app for", "as a sysadmin", "the
// config file"), manuals write the full words ("distribution",
// "application", "system administrator", "configuration"). Stemming cannot
// join the two, and WordNet has few of them, so the query side adds the full
// words of a short form it finds, at ClippingWeight: nearly the user's own
// term, since it names the same thing. The list is general computing usage,
// not any one manual's vocabulary; an expansion a corpus does not hold costs
// nothing.
//
// Each line: the short forms, a colon, the full words. Short forms are
// matched by their stems, so a plural and its singular are one ("devs" is
// "dev"): a short form whose stem is also a path or a word of its own in
// technical text is left out ("dev" and "devs" of /dev, "dist" of
// dist-upgrade, "stats" of stat, "temp" of temperature).
const clippingTable = `
app apps: application
distro distros: distribution
sysadmin sysadmins: system administrator
admin admins: administrator
config configs conf: configuration
repo repos: repository
docs: documentation
info: information
spec specs: specification
env: environment
dir dirs: directory
lib libs: library
pkg pkgs: package
dep deps: dependency
pref prefs: preference
tmp: temporary
exe: executable
auth: authentication
perm perms: permission
param params: parameter
arg args: argument
func: function
db: database
gui: graphical interface
cli: command line
os: operating system
vm vms: virtual machine
pc pcs: computer
mobo: motherboard
cpu: processor
ram: memory
hdd: hard disk
wifi: wireless
src: source
img: image
pic pics: picture
msg msgs: message
mgmt: management
impl: implementation
ver: version
req: request
max: maximum
avg: average
addr: address
arch: architecture
cert certs: certificate
creds: credentials
passwd pw: password
fs: filesystem
proc: process
util utils: utility
misc: miscellaneous
ref: reference
intro: introduction
lang: language
`

var (
	clipOnce  sync.Once
	clipTable map[string][]string
)

// Clippings returns the stems of the full words of a short form, given as
// the analyzer stems it ("distros" → "distro" → ["distribut"]), or nil.
func Clippings(stem string) []string {
	clipOnce.Do(loadClippings)
	return clipTable[stem]
}

// Expansions yields every term Query may add for a user's stem: the full
// words of a short form (Clippings), then its synonyms (Synonyms), all of
// them, whatever MaxSynonyms keeps. An index that groups a query's terms by
// the user's word they came from (a coordination factor) asks this, so the
// grouping follows whatever Query adds.
func Expansions(stem string) iter.Seq[string] {
	return func(yield func(string) bool) {
		for _, list := range [2][]string{Clippings(stem), Synonyms(stem)} {
			for _, t := range list {
				if !yield(t) {
					return
				}
			}
		}
	}
}

func loadClippings() {
	a := NewEnglish()
	clipTable = map[string][]string{}
	for _, line := range strings.Split(clippingTable, "\n") {
		short, full, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		words := a.Terms(full)
		for _, w := range strings.Fields(short) {
			for _, s := range a.Terms(w) {
				for _, f := range words {
					if f != s && !slices.Contains(clipTable[s], f) {
						clipTable[s] = append(clipTable[s], f)
					}
				}
			}
		}
	}
}
