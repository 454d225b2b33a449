package runtime

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"

	"github.com/aiforge/aiforge/pkg/sandbox"
)

// The OCI bundle of a sandbox. What the code inside sees:
//
//	/            an empty, read-only directory (StateDir/rootfs) with the
//	             usual symbolic links into /usr and an /etc/passwd for uid 1000
//	/usr         the host's HostUsr, bind-mounted read-only
//	/opt/agent   the agent script, read-only
//	/opt/egress  allow-list sandboxes only: the directory of the host egress
//	             proxy's unix socket, read-only
//	/mnt/data    tmpfs inside gVisor of DiskBytes (the container's files)
//	/tmp         tmpfs inside gVisor of DiskBytes
//	/proc        gVisor's own
//
// The process is the agent, uid/gid 1000, no capabilities, no new
// privileges, an environment of PATH, HOME and LANG (plus the proxy
// variables of an allow-list sandbox), rlimits on address space (about
// three quarters of the memory limit, so that an allocation fails cleanly
// before the cgroup kills the sandbox), open files and core dumps; the
// agent sets RLIMIT_NPROC (Pids) itself.

const (
	agentDir   = "/opt/agent"
	egressDir  = "/opt/egress"
	proxyPort  = 3128
	cgroupRoot = "aiforge-sandbox"
)

type ociSpec struct {
	OCIVersion string     `json:"ociVersion"`
	Process    ociProcess `json:"process"`
	Root       ociRoot    `json:"root"`
	Hostname   string     `json:"hostname"`
	Mounts     []ociMount `json:"mounts"`
	Linux      ociLinux   `json:"linux"`
}

type ociProcess struct {
	User            ociUser     `json:"user"`
	Args            []string    `json:"args"`
	Env             []string    `json:"env"`
	Cwd             string      `json:"cwd"`
	NoNewPrivileges bool        `json:"noNewPrivileges"`
	Capabilities    struct{}    `json:"capabilities"`
	Rlimits         []ociRlimit `json:"rlimits"`
}

type ociUser struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
}

type ociRlimit struct {
	Type string `json:"type"`
	Hard uint64 `json:"hard"`
	Soft uint64 `json:"soft"`
}

type ociRoot struct {
	Path     string `json:"path"`
	Readonly bool   `json:"readonly"`
}

type ociMount struct {
	Destination string   `json:"destination"`
	Type        string   `json:"type"`
	Source      string   `json:"source"`
	Options     []string `json:"options,omitempty"`
}

type ociLinux struct {
	CgroupsPath string         `json:"cgroupsPath"`
	Namespaces  []ociNamespace `json:"namespaces"`
	Resources   ociResources   `json:"resources"`
}

type ociNamespace struct {
	Type string `json:"type"`
}

type ociResources struct {
	Memory struct {
		Limit int64 `json:"limit"`
	} `json:"memory"`
	Pids struct {
		Limit int64 `json:"limit"`
	} `json:"pids"`
	CPU struct {
		Quota  int64  `json:"quota"`
		Period uint64 `json:"period"`
	} `json:"cpu"`
}

// prepareShared makes the read-only root and the agent directory shared by
// every sandbox of the runtime.
func (r *Runtime) prepareShared() error {
	root := filepath.Join(r.cfg.StateDir, "rootfs")
	for _, d := range []string{"usr", "etc", "tmp", "mnt/data", "proc", "dev", "sys", "opt/agent", "opt/egress"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	for name, target := range map[string]string{"bin": "usr/bin", "lib": "usr/lib", "lib64": "usr/lib64", "sbin": "usr/sbin"} {
		p := filepath.Join(root, name)
		if _, err := os.Lstat(p); err == nil {
			continue
		}
		if err := os.Symlink(target, p); err != nil {
			return err
		}
	}
	files := map[string]string{
		"etc/passwd": "sandbox:x:1000:1000:sandbox:/mnt/data:/bin/bash\n",
		"etc/group":  "sandbox:x:1000:\n",
		"etc/hosts":  "127.0.0.1 localhost\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(root, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	agent := filepath.Join(r.cfg.StateDir, "agent")
	if err := os.MkdirAll(agent, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(agent, 0o755); err != nil {
		return err
	}
	if goruntime.GOARCH == "amd64" {
		if err := os.WriteFile(filepath.Join(agent, statxShimName), statxShim, 0o644); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(agent, "agent.py"), agentScript, 0o644)
}

// statxShimName is the statx shim's file in the agent directory.
const statxShimName = "statx.so"

// writeBundle writes the sandbox's config.json into dir.
func (r *Runtime) writeBundle(dir, id string, spec Spec, egress string) error {
	c := r.cfg
	env := []string{"PATH=/usr/bin:/bin", "HOME=" + sandbox.DataDir, "LANG=C.UTF-8", "PYTHONDONTWRITEBYTECODE=1"}
	if goruntime.GOARCH == "amd64" {
		env = append(env, "LD_PRELOAD="+agentDir+"/"+statxShimName)
	}
	mounts := []ociMount{
		{Destination: "/proc", Type: "proc", Source: "proc"},
		{Destination: "/usr", Type: "bind", Source: c.HostUsr, Options: []string{"rbind", "ro"}},
		{Destination: agentDir, Type: "bind", Source: filepath.Join(c.StateDir, "agent"), Options: []string{"rbind", "ro"}},
		{Destination: sandbox.DataDir, Type: "tmpfs", Source: "tmpfs", Options: []string{fmt.Sprintf("size=%d", c.DiskBytes), "mode=1777"}},
		{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{fmt.Sprintf("size=%d", c.DiskBytes), "mode=1777"}},
	}
	if egress != "" {
		mounts = append(mounts, ociMount{Destination: egressDir, Type: "bind", Source: egress, Options: []string{"rbind", "ro"}})
		proxy := fmt.Sprintf("http://127.0.0.1:%d", proxyPort)
		env = append(env, "HTTP_PROXY="+proxy, "HTTPS_PROXY="+proxy, "http_proxy="+proxy, "https_proxy="+proxy)
	}
	as := uint64(spec.MemoryBytes) / 4 * 3
	s := ociSpec{
		OCIVersion: "1.0.0",
		Process: ociProcess{
			User: ociUser{UID: 1000, GID: 1000},
			// RLIMIT_NPROC is set by the agent inside gVisor: in the spec,
			// runsc would also apply it to its own host processes under
			// ptrace, and the sandbox would crash instead of fork failing.
			Args:            []string{c.Python, "-I", "-S", agentDir + "/agent.py", fmt.Sprintf("--nproc=%d", c.Pids)},
			Env:             env,
			Cwd:             sandbox.DataDir,
			NoNewPrivileges: true,
			Rlimits: []ociRlimit{
				{Type: "RLIMIT_AS", Hard: as, Soft: as},
				{Type: "RLIMIT_CORE", Hard: 0, Soft: 0},
				{Type: "RLIMIT_NOFILE", Hard: 4096, Soft: 4096},
			},
		},
		Root:     ociRoot{Path: filepath.Join(c.StateDir, "rootfs"), Readonly: true},
		Hostname: "sandbox",
		Mounts:   mounts,
		Linux: ociLinux{
			CgroupsPath: "/" + cgroupRoot + "/" + id,
			Namespaces:  []ociNamespace{{"pid"}, {"ipc"}, {"uts"}, {"mount"}, {"network"}},
		},
	}
	s.Linux.Resources.Memory.Limit = spec.MemoryBytes
	// The host pids limit only backs up RLIMIT_NPROC inside: gVisor's own
	// threads count against it (under ptrace several host threads per task),
	// and reaching it kills the sandbox.
	s.Linux.Resources.Pids.Limit = int64(8*c.Pids + 512)
	s.Linux.Resources.CPU.Period = 100000
	s.Linux.Resources.CPU.Quota = int64(c.CPUs * 100000)
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "config.json"), b, 0o600)
}
