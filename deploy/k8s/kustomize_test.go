package k8s

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/aiforge/aiforge/pkg/busauth"
)

// ScaledObject is the part of KEDA's keda.sh/v1alpha1 ScaledObject these
// manifests use; decoding rejects any other field.
type ScaledObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		ScaleTargetRef struct {
			APIVersion string `json:"apiVersion,omitempty"`
			Kind       string `json:"kind,omitempty"`
			Name       string `json:"name"`
		} `json:"scaleTargetRef"`
		PollingInterval *int32 `json:"pollingInterval,omitempty"`
		CooldownPeriod  *int32 `json:"cooldownPeriod,omitempty"`
		MinReplicaCount *int32 `json:"minReplicaCount,omitempty"`
		MaxReplicaCount *int32 `json:"maxReplicaCount,omitempty"`
		Triggers        []struct {
			Type       string            `json:"type"`
			MetricType string            `json:"metricType,omitempty"`
			Metadata   map[string]string `json:"metadata"`
		} `json:"triggers"`
	} `json:"spec"`
}

// objects is one kustomize build, decoded.
type objects struct {
	namespaces      []corev1.Namespace
	configMaps      map[string]*corev1.ConfigMap
	secrets         map[string]*corev1.Secret
	services        map[string]*corev1.Service
	pvcs            map[string]*corev1.PersistentVolumeClaim
	deployments     map[string]*appsv1.Deployment
	statefulSets    map[string]*appsv1.StatefulSet
	jobs            map[string]*batchv1.Job
	pdbs            []*policyv1.PodDisruptionBudget
	hpas            map[string]*autoscalingv2.HorizontalPodAutoscaler
	netpols         map[string]*networkingv1.NetworkPolicy
	runtimeClasses  map[string]*nodev1.RuntimeClass
	scaledObjects   map[string]*ScaledObject
	namespacedCount int
}

// strict decodes JSON into v, refusing fields v's type does not have.
func strict(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return fmt.Errorf("trailing data")
	}
	return nil
}

func decodeInto[T any](t *testing.T, id string, b []byte) *T {
	t.Helper()
	v := new(T)
	if err := strict(b, v); err != nil {
		t.Fatalf("%s: strict decode into %T: %v", id, v, err)
	}
	return v
}

// fixture copies base/ and overlays/ into a temporary directory with a
// stand-in for base/nats-creds/ (what `aiforge nats config` writes: one
// seed per identity and the servers' authorization block), so that the
// build never reads real credentials.
func fixture(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	for _, top := range []string{"base", "overlays"} {
		err := filepath.WalkDir(top, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && path == filepath.Join("base", "nats-creds") {
				return filepath.SkipDir
			}
			if d.IsDir() {
				return os.MkdirAll(filepath.Join(dst, path), 0o755)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(dst, path), b, 0o644)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	creds := filepath.Join(dst, "base", "nats-creds")
	if err := os.MkdirAll(creds, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, id := range busauth.Identities() {
		if err := os.WriteFile(busauth.SeedFile(creds, id), []byte("SU-test-seed-"+id+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(creds, "auth.conf"), []byte("authorization {\n  users: []\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"secrets.key": "test-private-key\n", "secrets.pub": "test-public-key\n"} {
		if err := os.WriteFile(filepath.Join(creds, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// build runs kustomize on dir and decodes every object strictly into its
// k8s.io/api type (KEDA's into ScaledObject); an unknown kind fails.
func build(t *testing.T, dir string) *objects {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	o := &objects{
		configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{},
		services: map[string]*corev1.Service{}, pvcs: map[string]*corev1.PersistentVolumeClaim{},
		deployments: map[string]*appsv1.Deployment{}, statefulSets: map[string]*appsv1.StatefulSet{},
		jobs: map[string]*batchv1.Job{}, hpas: map[string]*autoscalingv2.HorizontalPodAutoscaler{},
		netpols: map[string]*networkingv1.NetworkPolicy{}, runtimeClasses: map[string]*nodev1.RuntimeClass{},
		scaledObjects: map[string]*ScaledObject{},
	}
	for _, r := range rm.Resources() {
		b, err := r.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		gvk := r.GetGvk()
		id := fmt.Sprintf("%s %s/%s %s", dir, gvk.Group, gvk.Kind, r.GetName())
		if gvk.Kind != "Namespace" && gvk.Kind != "RuntimeClass" {
			o.namespacedCount++
			if ns := r.GetNamespace(); ns != "aiforge" {
				t.Errorf("%s: namespace %q, want aiforge", id, ns)
			}
		}
		switch gvk.ApiVersion() + " " + gvk.Kind {
		case "v1 Namespace":
			o.namespaces = append(o.namespaces, *decodeInto[corev1.Namespace](t, id, b))
		case "v1 ConfigMap":
			o.configMaps[r.GetName()] = decodeInto[corev1.ConfigMap](t, id, b)
		case "v1 Secret":
			o.secrets[r.GetName()] = decodeInto[corev1.Secret](t, id, b)
		case "v1 Service":
			o.services[r.GetName()] = decodeInto[corev1.Service](t, id, b)
		case "v1 PersistentVolumeClaim":
			o.pvcs[r.GetName()] = decodeInto[corev1.PersistentVolumeClaim](t, id, b)
		case "apps/v1 Deployment":
			o.deployments[r.GetName()] = decodeInto[appsv1.Deployment](t, id, b)
		case "apps/v1 StatefulSet":
			o.statefulSets[r.GetName()] = decodeInto[appsv1.StatefulSet](t, id, b)
		case "batch/v1 Job":
			o.jobs[r.GetName()] = decodeInto[batchv1.Job](t, id, b)
		case "policy/v1 PodDisruptionBudget":
			o.pdbs = append(o.pdbs, decodeInto[policyv1.PodDisruptionBudget](t, id, b))
		case "autoscaling/v2 HorizontalPodAutoscaler":
			o.hpas[r.GetName()] = decodeInto[autoscalingv2.HorizontalPodAutoscaler](t, id, b)
		case "networking.k8s.io/v1 NetworkPolicy":
			o.netpols[r.GetName()] = decodeInto[networkingv1.NetworkPolicy](t, id, b)
		case "node.k8s.io/v1 RuntimeClass":
			o.runtimeClasses[r.GetName()] = decodeInto[nodev1.RuntimeClass](t, id, b)
		case "keda.sh/v1alpha1 ScaledObject":
			o.scaledObjects[r.GetName()] = decodeInto[ScaledObject](t, id, b)
		default:
			t.Errorf("%s: no strict decoder for %s %s: add its type to the test", id, gvk.ApiVersion(), gvk.Kind)
		}
	}
	return o
}

var builds = []string{"base", "overlays/dev", "overlays/prod"}

// TestBuilds builds the base and each overlay and checks what every build
// must have.
func TestBuilds(t *testing.T) {
	root := fixture(t)
	for _, name := range builds {
		t.Run(name, func(t *testing.T) {
			o := build(t, filepath.Join(root, name))
			checkSecrets(t, o)
			checkWorkloads(t, o)
			checkVLLMVariants(t, o, name == "base")
			checkNetworkPolicies(t, o)
			checkScaling(t, o)
			checkSandbox(t, o)
			checkModels(t, o)
			checkSealingKeys(t, o)
			checkScrape(t, o)
		})
	}
}

// checkSecrets: every bus identity has its Secret (key nkey), and no other
// aiforge-nats-* Secret exists.
func checkSecrets(t *testing.T, o *objects) {
	var want []string
	for _, id := range busauth.Identities() {
		name := "aiforge-nats-" + id
		want = append(want, name)
		s, ok := o.secrets[name]
		if !ok {
			t.Errorf("identity %s: no Secret %s", id, name)
			continue
		}
		if _, ok := s.Data["nkey"]; !ok {
			t.Errorf("Secret %s: no key nkey", name)
		}
	}
	for name := range o.secrets {
		if strings.HasPrefix(name, "aiforge-nats-") && !slices.Contains(want, name) {
			t.Errorf("Secret %s names no identity of pkg/busauth", name)
		}
	}
	if _, ok := o.secrets["nats-auth"]; !ok {
		t.Error("no Secret nats-auth (the NATS servers' authorization block)")
	}
}

// checkSealingKeys: the replicas of the workers, the batch service and the
// guardian (tenants' model-bucket credentials) open what any edge sealed, so each is given the one private key of the Secret
// aiforge-secrets-key (AIFORGE_SECRETS_KEY_FILE into its mount), never a
// key generated in its own data dir; the edges get only the public key;
// no other container mounts the private key.
func checkSealingKeys(t *testing.T, o *objects) {
	for _, name := range []string{"aiforge-secrets-key", "aiforge-secrets-pub"} {
		if _, ok := o.secrets[name]; !ok {
			t.Errorf("no Secret %s", name)
		}
	}
	for what, tpl := range podSpecs(o) {
		spec := tpl.Spec
		for _, c := range spec.Containers {
			where := what + " container " + c.Name
			target := ""
			if isAiforge(c) && len(c.Args) >= 2 && c.Args[0] == "run" {
				target = c.Args[1]
			}
			keyFile, keySecret := sealingFile(spec, c, "AIFORGE_SECRETS_KEY_FILE")
			pubFile, pubSecret := sealingFile(spec, c, "AIFORGE_SECRETS_PUBLIC_KEY_FILE")
			mountsKey := mountsSecret(spec, c, "aiforge-secrets-key")
			switch target {
			case "workers", "batch", "guardian":
				if keySecret != "aiforge-secrets-key" {
					t.Errorf("%s: AIFORGE_SECRETS_KEY_FILE %q is not in a mount of Secret aiforge-secrets-key (%q)", where, keyFile, keySecret)
				}
			case "edge":
				if pubSecret != "aiforge-secrets-pub" {
					t.Errorf("%s: AIFORGE_SECRETS_PUBLIC_KEY_FILE %q is not in a mount of Secret aiforge-secrets-pub (%q)", where, pubFile, pubSecret)
				}
				if mountsKey || keyFile != "" {
					t.Errorf("%s: the edge is given the private secrets key", where)
				}
			default:
				if mountsKey || keyFile != "" {
					t.Errorf("%s (target %q): given the private secrets key, which only the workers, batch and guardian hold", where, target)
				}
			}
		}
	}
}

// checkScrape: every aiforge service's pods are annotated for Prometheus
// on the port that serves its /metrics (the edge's API port, the others'
// health listener).
func checkScrape(t *testing.T, o *objects) {
	for what, tpl := range podSpecs(o) {
		if tpl.Labels["aiforge.dev/role"] != "service" {
			continue
		}
		a := tpl.Annotations
		if a["prometheus.io/scrape"] != "true" || a["prometheus.io/path"] != "/metrics" {
			t.Errorf("%s: not annotated for scraping /metrics: %v", what, a)
			continue
		}
		found := false
		for _, c := range tpl.Spec.Containers {
			for _, p := range c.Ports {
				if fmt.Sprint(p.ContainerPort) == a["prometheus.io/port"] && isAiforge(c) {
					found = true
				}
			}
		}
		if !found {
			t.Errorf("%s: prometheus.io/port %q is no port of its aiforge container", what, a["prometheus.io/port"])
		}
	}
}

// sealingFile is the value of env in c and the Secret whose mount holds
// that path ("" when none).
func sealingFile(spec corev1.PodSpec, c corev1.Container, env string) (file, secret string) {
	for _, e := range c.Env {
		if e.Name == env {
			file = e.Value
		}
	}
	if file == "" {
		return "", ""
	}
	for _, m := range c.VolumeMounts {
		if !strings.HasPrefix(file, strings.TrimSuffix(m.MountPath, "/")+"/") {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name == m.Name && v.Secret != nil {
				for _, it := range v.Secret.Items {
					if filepath.Join(m.MountPath, it.Path) == file {
						return file, v.Secret.SecretName
					}
				}
			}
		}
	}
	return file, ""
}

func mountsSecret(spec corev1.PodSpec, c corev1.Container, secret string) bool {
	for _, m := range c.VolumeMounts {
		for _, v := range spec.Volumes {
			if v.Name == m.Name && v.Secret != nil && v.Secret.SecretName == secret {
				return true
			}
		}
	}
	return false
}

// podSpecs are the pod templates of every Deployment and StatefulSet.
func podSpecs(o *objects) map[string]*corev1.PodTemplateSpec {
	m := map[string]*corev1.PodTemplateSpec{}
	for n, d := range o.deployments {
		m["Deployment "+n] = &d.Spec.Template
	}
	for n, s := range o.statefulSets {
		m["StatefulSet "+n] = &s.Spec.Template
	}
	return m
}

func isAiforge(c corev1.Container) bool { return strings.HasPrefix(c.Image, "aiforge:") }

// checkWorkloads: probes, resources, spread and a PDB for every workload;
// every aiforge container runs as its own bus identity.
func checkWorkloads(t *testing.T, o *objects) {
	if len(o.deployments) == 0 {
		t.Fatal("no Deployments")
	}
	services := map[string]bool{}
	for what, tpl := range podSpecs(o) {
		spec := tpl.Spec
		if len(spec.TopologySpreadConstraints) == 0 {
			t.Errorf("%s: no topologySpreadConstraints", what)
		}
		var pdbs int
		for _, p := range o.pdbs {
			sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
			if err != nil {
				t.Fatalf("PDB %s: %v", p.Name, err)
			}
			if sel.Matches(labels.Set(tpl.Labels)) {
				pdbs++
			}
		}
		if pdbs != 1 {
			t.Errorf("%s: %d PodDisruptionBudgets select its pods, want 1", what, pdbs)
		}
		for _, c := range spec.Containers {
			where := what + " container " + c.Name
			if c.ReadinessProbe == nil || c.LivenessProbe == nil {
				t.Errorf("%s: readiness and liveness probes wanted", where)
			}
			req := c.Resources.Requests
			if req.Cpu().IsZero() || req.Memory().IsZero() {
				t.Errorf("%s: cpu and memory requests wanted, have %v", where, req)
			}
			if c.Resources.Limits.Memory().IsZero() {
				t.Errorf("%s: a memory limit wanted", where)
			}
			if !isAiforge(c) {
				continue
			}
			if len(c.Args) < 2 || c.Args[0] != "run" {
				t.Errorf("%s: args %q, want run TARGET", where, c.Args)
				continue
			}
			id := busauth.ServiceOf(c.Args[1])
			if id == "" {
				t.Errorf("%s: target %s has no bus identity", where, c.Args[1])
				continue
			}
			services[id] = true
			if got := natsSecret(spec, c); got != "aiforge-nats-"+id {
				t.Errorf("%s: runs as %s but mounts NATS secret %q, want aiforge-nats-%s", where, id, got, id)
			}
			if p := c.ReadinessProbe; p != nil && (p.HTTPGet == nil || p.HTTPGet.Path != "/readyz") {
				t.Errorf("%s: readiness wants GET /readyz", where)
			}
			if c.Args[1] != "edge" && !servesHealth(o, spec, c) {
				t.Errorf("%s: probes a port but AIFORGE_HEALTH_LISTEN does not serve it", where)
			}
		}
	}
	for _, id := range busauth.Services {
		if !services[id] {
			t.Errorf("service %s: no Deployment runs it", id)
		}
	}
	job, ok := o.jobs["provision"]
	if !ok {
		t.Fatal("no provision Job")
	}
	if got := natsSecret(job.Spec.Template.Spec, job.Spec.Template.Spec.Containers[0]); got != "aiforge-nats-admin" {
		t.Errorf("provision Job mounts %q, want aiforge-nats-admin", got)
	}
}

// natsSecret is the Secret whose volume c mounts where AIFORGE_NATS_NKEY
// points.
func natsSecret(spec corev1.PodSpec, c corev1.Container) string {
	for _, m := range c.VolumeMounts {
		if m.MountPath != "/etc/aiforge/nats" {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name == m.Name && v.Secret != nil {
				return v.Secret.SecretName
			}
		}
	}
	return ""
}

// servesHealth: c's probes name its container port 8081, which the
// ConfigMap's AIFORGE_HEALTH_LISTEN serves.
func servesHealth(o *objects, spec corev1.PodSpec, c corev1.Container) bool {
	cm, ok := o.configMaps["aiforge"]
	if !ok || !strings.HasSuffix(cm.Data["AIFORGE_HEALTH_LISTEN"], ":8081") {
		return false
	}
	for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil {
			return false
		}
		port := p.HTTPGet.Port.String()
		found := false
		for _, cp := range c.Ports {
			if (cp.Name == port || fmt.Sprint(cp.ContainerPort) == port) && cp.ContainerPort == 8081 {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// checkVLLMVariants: vllm-cpu and vllm-gpu are the same Deployment but for
// their name and variant label, and the engine container's image,
// resources and args, which do differ. An overlay chooses which variant
// runs (replicas); the base runs both alike.
func checkVLLMVariants(t *testing.T, o *objects, base bool) {
	cpu, gpu := o.deployments["vllm-cpu"], o.deployments["vllm-gpu"]
	if cpu == nil || gpu == nil {
		t.Fatal("want Deployments vllm-cpu and vllm-gpu")
	}
	ec, eg := engine(t, cpu), engine(t, gpu)
	if ec.Image == eg.Image {
		t.Errorf("vLLM variants share the image %s", ec.Image)
	}
	if reflect.DeepEqual(ec.Args, eg.Args) {
		t.Error("vLLM variants share the engine flags")
	}
	if _, ok := eg.Resources.Limits["nvidia.com/gpu"]; !ok {
		t.Error("vllm-gpu: no nvidia.com/gpu limit")
	}
	if _, ok := ec.Resources.Requests["nvidia.com/gpu"]; ok {
		t.Error("vllm-cpu asks for a GPU")
	}
	a, b := strip(t, cpu, "cpu"), strip(t, gpu, "gpu")
	if !base {
		a.Spec.Replicas, b.Spec.Replicas = nil, nil
	}
	if !reflect.DeepEqual(a, b) {
		t.Errorf("vllm-cpu and vllm-gpu differ beyond image, resources and flags:\n%s", diff(t, a, b))
	}
}

func engine(t *testing.T, d *appsv1.Deployment) *corev1.Container {
	t.Helper()
	for i := range d.Spec.Template.Spec.Containers {
		if c := &d.Spec.Template.Spec.Containers[i]; c.Name == "engine" {
			return c
		}
	}
	t.Fatalf("Deployment %s: no engine container", d.Name)
	return nil
}

// strip removes what may differ between the two vLLM variants.
func strip(t *testing.T, d *appsv1.Deployment, variant string) *appsv1.Deployment {
	d = d.DeepCopy()
	d.Name = strings.TrimSuffix(d.Name, "-"+variant)
	for _, m := range []map[string]string{d.Labels, d.Spec.Selector.MatchLabels, d.Spec.Template.Labels} {
		if m["aiforge.dev/variant"] != variant {
			t.Errorf("Deployment vllm-%s: label aiforge.dev/variant %q", variant, m["aiforge.dev/variant"])
		}
		delete(m, "aiforge.dev/variant")
	}
	for _, c := range d.Spec.Template.Spec.TopologySpreadConstraints {
		delete(c.LabelSelector.MatchLabels, "aiforge.dev/variant")
	}
	e := engine(t, d)
	e.Image, e.Args, e.Resources = "", nil, corev1.ResourceRequirements{}
	return d
}

// diff lists the lines of a's and b's indented JSON that differ.
func diff(t *testing.T, a, b any) string {
	ja, _ := json.MarshalIndent(a, "", "  ")
	jb, _ := json.MarshalIndent(b, "", "  ")
	la, lb := strings.Split(string(ja), "\n"), strings.Split(string(jb), "\n")
	var out []string
	for i := 0; i < max(len(la), len(lb)); i++ {
		var x, y string
		if i < len(la) {
			x = la[i]
		}
		if i < len(lb) {
			y = lb[i]
		}
		if x != y {
			out = append(out, fmt.Sprintf("line %d:\n  cpu: %s\n  gpu: %s", i+1, x, y))
		}
	}
	return strings.Join(out, "\n")
}

// pod is a workload's pod labels, for checking what a policy selects.
type pod struct {
	what   string
	labels labels.Set
}

func pods(o *objects) []pod {
	var ps []pod
	for what, tpl := range podSpecs(o) {
		ps = append(ps, pod{what, labels.Set(tpl.Labels)})
	}
	for n, j := range o.jobs {
		ps = append(ps, pod{"Job " + n, labels.Set(j.Spec.Template.Labels)})
	}
	slices.SortFunc(ps, func(a, b pod) int { return strings.Compare(a.what, b.what) })
	return ps
}

func selects(t *testing.T, s *metav1.LabelSelector, l labels.Set) bool {
	t.Helper()
	if s == nil {
		return false
	}
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		t.Fatal(err)
	}
	return sel.Matches(l)
}

// peerAdmits: a peer of a policy in namespace aiforge admits a pod of
// namespace aiforge with these labels (ipBlocks admit none of them: pod
// addresses are not what these policies name).
func peerAdmits(t *testing.T, p networkingv1.NetworkPolicyPeer, l labels.Set) bool {
	if p.IPBlock != nil {
		return false
	}
	if p.NamespaceSelector != nil && !selects(t, p.NamespaceSelector, labels.Set{"kubernetes.io/metadata.name": "aiforge"}) {
		return false
	}
	if p.PodSelector == nil {
		return true
	}
	return selects(t, p.PodSelector, l)
}

// ingressAdmits: policy np lets a pod with labels l reach port.
func ingressAdmits(t *testing.T, np *networkingv1.NetworkPolicy, l labels.Set, port int32) bool {
	for _, r := range np.Spec.Ingress {
		portOK := len(r.Ports) == 0
		for _, p := range r.Ports {
			if p.Port != nil && p.Port.IntVal == port {
				portOK = true
			}
		}
		if !portOK {
			continue
		}
		if len(r.From) == 0 {
			return true
		}
		for _, f := range r.From {
			if peerAdmits(t, f, l) {
				return true
			}
		}
	}
	return false
}

func netpol(t *testing.T, o *objects, name string, want ...networkingv1.PolicyType) *networkingv1.NetworkPolicy {
	t.Helper()
	np, ok := o.netpols[name]
	if !ok {
		t.Fatalf("no NetworkPolicy %s", name)
	}
	for _, w := range want {
		if !slices.Contains(np.Spec.PolicyTypes, w) {
			t.Errorf("NetworkPolicy %s: policy types %v lack %s", name, np.Spec.PolicyTypes, w)
		}
	}
	return np
}

// checkNetworkPolicies: NATS and Qdrant are ClusterIP Services reachable
// from aiforge pods only; engines only from workers; sandbox pods reach
// nothing but NATS and DNS (and, where an overlay adds it, the object store),
// never an IP block such as the metadata address.
func checkNetworkPolicies(t *testing.T, o *objects) {
	for _, name := range []string{"nats", "nats-headless", "qdrant"} {
		s, ok := o.services[name]
		if !ok {
			t.Errorf("no Service %s", name)
			continue
		}
		if s.Spec.Type != corev1.ServiceTypeClusterIP || len(s.Spec.ExternalIPs) > 0 {
			t.Errorf("Service %s: type %q, external IPs %v: want ClusterIP only", name, s.Spec.Type, s.Spec.ExternalIPs)
		}
	}
	stranger := labels.Set{"app.kubernetes.io/name": "stranger"}
	all := pods(o)
	for _, c := range []struct {
		policy, target string
		port           int32
	}{{"nats", "nats", 4222}, {"qdrant", "qdrant", 6333}, {"qdrant", "qdrant", 6334}} {
		np := netpol(t, o, c.policy, networkingv1.PolicyTypeIngress)
		if !selects(t, &np.Spec.PodSelector, labels.Set{"app.kubernetes.io/name": c.target}) {
			t.Errorf("NetworkPolicy %s does not select the %s pods", c.policy, c.target)
		}
		for _, p := range all {
			if !ingressAdmits(t, np, p.labels, c.port) {
				t.Errorf("NetworkPolicy %s: %s may not reach port %d", c.policy, p.what, c.port)
			}
		}
		if ingressAdmits(t, np, stranger, c.port) {
			t.Errorf("NetworkPolicy %s: a pod not of aiforge reaches port %d", c.policy, c.port)
		}
	}

	np := netpol(t, o, "engines", networkingv1.PolicyTypeIngress)
	var engines int
	for _, p := range all {
		isEngine := p.labels["aiforge.dev/role"] == "engine"
		if isEngine != selects(t, &np.Spec.PodSelector, p.labels) {
			t.Errorf("NetworkPolicy engines: selects %s: %v, want %v", p.what, !isEngine, isEngine)
		}
		if isEngine {
			engines++
			continue
		}
		reaches := false
		for _, port := range []int32{8000, 8080, 11434} {
			reaches = reaches || ingressAdmits(t, np, p.labels, port)
		}
		if want := p.labels["aiforge.dev/worker"] == "true"; reaches != want {
			t.Errorf("NetworkPolicy engines: %s reaches engines: %v, want %v", p.what, reaches, want)
		}
	}
	if engines != 4 {
		t.Errorf("%d engine workloads, want 4 (vllm-cpu, vllm-gpu, llamacpp, ollama)", engines)
	}

	sb := netpol(t, o, "sandbox", networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress)
	if !selects(t, &sb.Spec.PodSelector, labels.Set(o.deployments["sandbox"].Spec.Template.Labels)) {
		t.Error("NetworkPolicy sandbox does not select the sandbox pods")
	}
	if len(sb.Spec.Ingress) != 0 {
		t.Errorf("NetworkPolicy sandbox admits ingress: %v", sb.Spec.Ingress)
	}
	natsOK := false
	for _, r := range sb.Spec.Egress {
		if len(r.To) == 0 {
			t.Error("NetworkPolicy sandbox: an egress rule without peers allows every destination")
		}
		for _, p := range r.To {
			if p.IPBlock != nil {
				t.Errorf("NetworkPolicy sandbox: egress to IP block %s (the metadata address 169.254.169.254/32 must stay unreachable)", p.IPBlock.CIDR)
			}
			if p.NamespaceSelector == nil && p.PodSelector != nil {
				for _, q := range all {
					if peerAdmits(t, p, q.labels) && q.labels["app.kubernetes.io/name"] != "nats" {
						t.Errorf("NetworkPolicy sandbox: egress reaches %s", q.what)
					}
				}
				if peerAdmits(t, p, labels.Set(o.statefulSets["nats"].Spec.Template.Labels)) {
					for _, port := range r.Ports {
						natsOK = natsOK || port.Port.IntVal == 4222
					}
				}
			}
			if ns := p.NamespaceSelector; ns != nil && selects(t, ns, labels.Set{"kubernetes.io/metadata.name": "aiforge"}) {
				t.Error("NetworkPolicy sandbox: egress to a namespace selector that admits the aiforge namespace")
			}
		}
	}
	if !natsOK {
		t.Error("NetworkPolicy sandbox: no egress to NATS on 4222")
	}
}

var (
	monitorRE = regexp.MustCompile(`^nats\.aiforge\.svc\.cluster\.local:8222$`)
	durableRE = regexp.MustCompile(`Durable:\s*"([^"]+)"|Durable\s*=\s*"([^"]+)"`)
)

// durables are the durable consumer names in a service's source.
func durables(t *testing.T, service string) []string {
	files, err := filepath.Glob(filepath.Join("..", "..", "services", service, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("services/%s: no sources (%v)", service, err)
	}
	var names []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range durableRE.FindAllStringSubmatch(string(b), -1) {
			names = append(names, m[1]+m[2])
		}
	}
	return names
}

// checkScaling: the edge HPA, and KEDA ScaledObjects for ingest, embedder,
// batch and usage whose JetStream triggers name a durable consumer the
// service really has, on the NATS monitoring endpoint.
func checkScaling(t *testing.T, o *objects) {
	h, ok := o.hpas["edge"]
	if !ok || h.Spec.ScaleTargetRef.Kind != "Deployment" || h.Spec.ScaleTargetRef.Name != "edge" {
		t.Error("want an HPA scaling Deployment edge")
	}
	for _, name := range []string{"ingest", "embedder", "batch", "usage"} {
		so, ok := o.scaledObjects[name]
		if !ok {
			t.Errorf("no ScaledObject %s", name)
			continue
		}
		if so.APIVersion != "keda.sh/v1alpha1" || so.Spec.ScaleTargetRef.Name != name || o.deployments[name] == nil {
			t.Errorf("ScaledObject %s: %s targets %q", name, so.APIVersion, so.Spec.ScaleTargetRef.Name)
		}
		if len(so.Spec.Triggers) == 0 {
			t.Errorf("ScaledObject %s: no triggers", name)
		}
		var lag bool
		for _, tr := range so.Spec.Triggers {
			if tr.Type != "nats-jetstream" {
				continue
			}
			lag = true
			m := tr.Metadata
			for _, k := range []string{"natsServerMonitoringEndpoint", "account", "stream", "consumer", "lagThreshold"} {
				if m[k] == "" {
					t.Errorf("ScaledObject %s: nats-jetstream trigger lacks %s", name, k)
				}
			}
			if !monitorRE.MatchString(m["natsServerMonitoringEndpoint"]) {
				t.Errorf("ScaledObject %s: monitoring endpoint %q is not the nats Service's port 8222", name, m["natsServerMonitoringEndpoint"])
			}
			if !slices.Contains(durables(t, name), m["consumer"]) {
				t.Errorf("ScaledObject %s: consumer %q is no durable of services/%s (have %v)", name, m["consumer"], name, durables(t, name))
			}
		}
		if want := name != "usage"; lag != want {
			t.Errorf("ScaledObject %s: a consumer-lag trigger: %v, want %v", name, lag, want)
		}
	}
}

// checkSandbox: the sandbox pods run in gVisor.
func checkSandbox(t *testing.T, o *objects) {
	rc, ok := o.runtimeClasses["gvisor"]
	if !ok || rc.Handler != "runsc" {
		t.Fatal("want RuntimeClass gvisor with handler runsc")
	}
	d := o.deployments["sandbox"]
	if rn := d.Spec.Template.Spec.RuntimeClassName; rn == nil || *rn != "gvisor" {
		t.Errorf("Deployment sandbox: runtimeClassName %v, want gvisor", rn)
	}
}

// checkModels: one ReadOnlyMany volume of weights, mounted read-only by
// every engine.
func checkModels(t *testing.T, o *objects) {
	pvc, ok := o.pvcs["models"]
	if !ok || !slices.Equal(pvc.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadOnlyMany}) {
		t.Fatal("want PersistentVolumeClaim models, ReadOnlyMany")
	}
	for n, d := range o.deployments {
		if d.Spec.Template.Labels["aiforge.dev/role"] != "engine" {
			continue
		}
		var vol string
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == "models" && v.PersistentVolumeClaim.ReadOnly {
				vol = v.Name
			}
		}
		mounted := false
		for _, m := range engine(t, d).VolumeMounts {
			mounted = mounted || (m.Name == vol && m.ReadOnly)
		}
		if vol == "" || !mounted {
			t.Errorf("Deployment %s: the engine does not mount the models volume read-only", n)
		}
	}
}

// TestOverlays: dev is one replica of everything on a single NATS node with
// R1 streams; prod is the 3-node cluster with R3 streams and replicas.
func TestOverlays(t *testing.T) {
	root := fixture(t)
	dev := build(t, filepath.Join(root, "overlays", "dev"))
	prod := build(t, filepath.Join(root, "overlays", "prod"))

	routes := regexp.MustCompile(`nats://nats-\d\.nats-headless:6222`)
	for _, c := range []struct {
		name     string
		o        *objects
		replicas string
		nodes    int32
	}{{"dev", dev, "1", 1}, {"prod", prod, "3", 3}} {
		if got := c.o.configMaps["aiforge"].Data["AIFORGE_STREAM_REPLICAS"]; got != c.replicas {
			t.Errorf("%s: AIFORGE_STREAM_REPLICAS %q, want %s", c.name, got, c.replicas)
		}
		if got := *c.o.statefulSets["nats"].Spec.Replicas; got != c.nodes {
			t.Errorf("%s: %d NATS nodes, want %d", c.name, got, c.nodes)
		}
		conf := c.o.configMaps["nats-config"].Data["nats.conf"]
		if n := len(routes.FindAllString(conf, -1)); (c.nodes == 1 && n != 0) || (c.nodes > 1 && int32(n) != c.nodes) {
			t.Errorf("%s: nats.conf has %d routes for %d nodes:\n%s", c.name, n, c.nodes, conf)
		}
		if !strings.Contains(conf, `include "auth/auth.conf"`) {
			t.Errorf("%s: nats.conf does not include the authorization block", c.name)
		}
	}
	for n, d := range dev.deployments {
		if *d.Spec.Replicas > 1 {
			t.Errorf("dev: Deployment %s has %d replicas", n, *d.Spec.Replicas)
		}
		c := d.Spec.Template.Spec.Containers[0]
		if isAiforge(c) && c.Resources.Requests.Memory().Cmp(prod.deployments[n].Spec.Template.Spec.Containers[0].Resources.Requests[corev1.ResourceMemory]) > 0 {
			t.Errorf("dev: Deployment %s asks for more memory than in prod", n)
		}
	}
	for _, n := range []string{"edge", "workers", "ingest", "embedder", "retriever", "batch", "sandbox"} {
		if *prod.deployments[n].Spec.Replicas < 2 {
			t.Errorf("prod: Deployment %s has %d replicas, want 2 or more", n, *prod.deployments[n].Spec.Replicas)
		}
	}
	if prod.configMaps["aiforge"].Data["AIFORGE_VECTOR_INDEX"] != "qdrant" {
		t.Error("prod: the retrievers share no Qdrant index, so they cannot have replicas")
	}
}

// TestStrictDecodingRejectsUnknownFields: the decoder this test relies on
// refuses a misspelt field.
func TestStrictDecodingRejectsUnknownFields(t *testing.T) {
	var d appsv1.Deployment
	if err := strict([]byte(`{"apiVersion":"apps/v1","kind":"Deployment","spec":{"replica":2}}`), &d); err == nil {
		t.Fatal("a misspelt field was accepted")
	}
	var so ScaledObject
	if err := strict([]byte(`{"spec":{"triggers":[{"type":"cpu","metdata":{}}]}}`), &so); err == nil {
		t.Fatal("a misspelt ScaledObject field was accepted")
	}
}
