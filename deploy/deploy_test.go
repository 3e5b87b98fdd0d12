package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/braidlabs/braid/cmd/braid/job"
	"github.com/braidlabs/braid/connectors/kafka"
)

const k8sDir = "k8s"

// Kubernetes versions to validate against: the one the manifests target at
// least, and the newest kubernetes-validate bundles.
var kubeVersions = []string{"1.30", "1.37"}

// Files in k8s/ that kustomization.yaml deliberately leaves out.
var notResources = map[string]string{
	"kustomization.yaml":    "the kustomization itself",
	"secret-example.yaml":   "placeholders that must never overwrite the real Secret",
	"hpa-external-lag.yaml": "the alternative to keda-scaledobject.yaml",
}

// doc is one YAML document of a manifest file.
type doc struct {
	file string
	obj  map[string]any
	raw  []byte // the document alone, re-encoded
}

func (d doc) kind() string       { s, _ := d.obj["kind"].(string); return s }
func (d doc) apiVersion() string { s, _ := d.obj["apiVersion"].(string); return s }
func (d doc) name() string {
	m, _ := d.obj["metadata"].(map[string]any)
	s, _ := m["name"].(string)
	return s
}
func (d doc) isKEDA() bool { return strings.HasPrefix(d.apiVersion(), "keda.sh/") }

// decode decodes d strictly into v: a field v does not have is an error.
func (d doc) decode(t *testing.T, v any) {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(d.raw))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %s %s: %v", d.file, d.kind(), d.name(), err)
	}
}

func readDocs(t *testing.T, path string) []doc {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return parseDocs(t, path, b)
}

func parseDocs(t *testing.T, name string, b []byte) []doc {
	t.Helper()
	var docs []doc
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var obj map[string]any
		err := dec.Decode(&obj)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if obj == nil {
			continue
		}
		raw, err := yaml.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, doc{file: name, obj: obj, raw: raw})
	}
	return docs
}

// manifests returns every object of every file in k8s/ but the
// kustomization, by file.
func manifests(t *testing.T) (files []string, docs []doc) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(k8sDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	files = slices.DeleteFunc(files, func(f string) bool { return filepath.Base(f) == "kustomization.yaml" })
	for _, f := range files {
		ds := readDocs(t, f)
		if len(ds) == 0 {
			t.Fatalf("%s holds no object", f)
		}
		docs = append(docs, ds...)
	}
	return files, docs
}

func find(t *testing.T, docs []doc, kind, name string) doc {
	t.Helper()
	for _, d := range docs {
		if d.kind() == kind && d.name() == name {
			return d
		}
	}
	t.Fatalf("no %s %s in %s", kind, name, k8sDir)
	return doc{}
}

// TestKubernetesSchemas validates every Kubernetes object in k8s/ (and,
// where kubectl is installed, the kustomize build) against the Kubernetes
// JSON schemas, strictly, with kubernetes-validate.
func TestKubernetesSchemas(t *testing.T) {
	files, docs := manifests(t)
	core := 0
	for _, d := range docs {
		if !d.isKEDA() {
			core++
		}
	}
	if kubectl, err := exec.LookPath("kubectl"); err == nil {
		built := kustomizeBuild(t, kubectl)
		path := filepath.Join(t.TempDir(), "kustomize-build.yaml")
		if err := os.WriteFile(path, built, 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, path)
		for _, d := range parseDocs(t, path, built) {
			if !d.isKEDA() {
				core++
			}
		}
	} else {
		t.Log("kubectl is not installed: validating the files only, not the kustomize build")
	}

	argv, env := kubernetesValidate(t)
	args := append(argv[1:], "--strict")
	for _, v := range kubeVersions {
		args = append(args, "-k", v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := run(ctx, "", env, argv[0], append(args, files...)...)
	t.Logf("kubernetes-validate --strict -k %s:\n%s", strings.Join(kubeVersions, " -k "), out)
	if err != nil {
		t.Fatalf("kubernetes-validate: %v", err)
	}
	passed := 0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		switch {
		case strings.HasPrefix(line, "INFO ") && strings.Contains(line, " passed for resource "):
			passed++
		case strings.HasPrefix(line, "WARN ") && strings.Contains(line, "api version keda.sh/v1alpha1"):
			// A CRD: validated by TestKEDAObjects.
		default:
			t.Errorf("kubernetes-validate: %s", line)
		}
	}
	if want := core * len(kubeVersions); passed != want {
		t.Errorf("kubernetes-validate passed %d objects × versions, want %d", passed, want)
	}
}

func kustomizeBuild(t *testing.T, kubectl string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, kubectl, "kustomize", k8sDir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v\n%s", k8sDir, err, stderr.String())
	}
	return out
}

// TestKustomization: kustomization.yaml lists every manifest except the
// ones it must not, and those exist.
func TestKustomization(t *testing.T) {
	var k struct {
		APIVersion string   `yaml:"apiVersion"`
		Kind       string   `yaml:"kind"`
		Namespace  string   `yaml:"namespace"`
		Resources  []string `yaml:"resources"`
		Images     []struct {
			Name    string `yaml:"name"`
			NewName string `yaml:"newName"`
			NewTag  string `yaml:"newTag"`
		} `yaml:"images"`
	}
	readDocs(t, filepath.Join(k8sDir, "kustomization.yaml"))[0].decode(t, &k)
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		t.Errorf("kustomization.yaml is %s %s", k.APIVersion, k.Kind)
	}
	files, _ := filepath.Glob(filepath.Join(k8sDir, "*.yaml"))
	have := map[string]bool{}
	for _, f := range files {
		have[filepath.Base(f)] = true
	}
	for _, r := range k.Resources {
		if !have[r] {
			t.Errorf("kustomization.yaml lists %s, which does not exist", r)
		}
		if why, ok := notResources[r]; ok {
			t.Errorf("kustomization.yaml lists %s: %s", r, why)
		}
	}
	for f := range have {
		if _, ok := notResources[f]; !ok && !slices.Contains(k.Resources, f) {
			t.Errorf("k8s/%s is not in kustomization.yaml's resources", f)
		}
	}
	for f := range notResources {
		if !have[f] {
			t.Errorf("k8s/%s is missing", f)
		}
	}
	if len(k.Images) != 1 || k.Images[0].Name != "braid" {
		t.Errorf("kustomization.yaml images = %+v, want one entry for the image named braid", k.Images)
	}

	if kubectl, err := exec.LookPath("kubectl"); err == nil {
		built := parseDocs(t, "kustomize build", kustomizeBuild(t, kubectl))
		var kinds []string
		for _, d := range built {
			kinds = append(kinds, d.kind())
			if m, _ := d.obj["metadata"].(map[string]any); m["namespace"] != k.Namespace {
				t.Errorf("built %s %s: namespace %v, want %s", d.kind(), d.name(), m["namespace"], k.Namespace)
			}
		}
		sort.Strings(kinds)
		want := []string{"ConfigMap", "PodDisruptionBudget", "ScaledObject", "Service", "StatefulSet", "TriggerAuthentication"}
		if !slices.Equal(kinds, want) {
			t.Errorf("kustomize build gives %v, want %v", kinds, want)
		}
	}
}

// KEDA objects, with the fields these manifests use. Decoding strictly into
// them catches a misspelt or misplaced field, which the npm validator (like
// the CRD's schema, which preserves unknown fields nowhere but does not
// reject them either) lets through.
type scaledObject struct {
	APIVersion string         `yaml:"apiVersion"`
	Kind       string         `yaml:"kind"`
	Metadata   map[string]any `yaml:"metadata"`
	Spec       struct {
		ScaleTargetRef struct {
			APIVersion string `yaml:"apiVersion"`
			Kind       string `yaml:"kind"`
			Name       string `yaml:"name"`
		} `yaml:"scaleTargetRef"`
		MinReplicaCount *int32 `yaml:"minReplicaCount"`
		MaxReplicaCount *int32 `yaml:"maxReplicaCount"`
		PollingInterval *int32 `yaml:"pollingInterval"`
		CooldownPeriod  *int32 `yaml:"cooldownPeriod"`
		Advanced        struct {
			HorizontalPodAutoscalerConfig struct {
				Behavior map[string]any `yaml:"behavior"`
			} `yaml:"horizontalPodAutoscalerConfig"`
		} `yaml:"advanced"`
		Triggers []struct {
			Type              string            `yaml:"type"`
			Metadata          map[string]string `yaml:"metadata"`
			AuthenticationRef struct {
				Name string `yaml:"name"`
				Kind string `yaml:"kind"`
			} `yaml:"authenticationRef"`
		} `yaml:"triggers"`
	} `yaml:"spec"`
}

type triggerAuthentication struct {
	APIVersion string         `yaml:"apiVersion"`
	Kind       string         `yaml:"kind"`
	Metadata   map[string]any `yaml:"metadata"`
	Spec       struct {
		SecretTargetRef []struct {
			Parameter string `yaml:"parameter"`
			Name      string `yaml:"name"`
			Key       string `yaml:"key"`
		} `yaml:"secretTargetRef"`
	} `yaml:"spec"`
}

// The metadata the KEDA Kafka scaler (2.12+) knows, and its TriggerAuthentication parameters.
var (
	kafkaScalerMetadata = []string{
		"bootstrapServers", "consumerGroup", "topic", "lagThreshold", "activationLagThreshold",
		"offsetResetPolicy", "allowIdleConsumers", "excludePersistentLag", "scaleToZeroOnInvalidOffset",
		"limitToPartitionsWithLag", "ensureEvenDistributionOfPartitions", "partitionLimitation", "version",
		"sasl", "tls", "unsafeSsl",
	}
	kafkaScalerAuthParams = []string{"sasl", "username", "password", "tls", "ca", "cert", "key", "keyPassword"}
	// braid's mechanism names as KEDA's sasl values.
	kedaSASL = map[string]string{"PLAIN": "plaintext", "SCRAM-SHA-256": "scram_sha256", "SCRAM-SHA-512": "scram_sha512", "": "none"}
)

// TestKEDAObjects validates the ScaledObject and the TriggerAuthentication
// with the validators of @kubernetes-models/keda, generated from KEDA's API
// types; the strict decoding and the cross-checks are in TestManifestsAgree.
func TestKEDAObjects(t *testing.T) {
	_, docs := manifests(t)
	var objs []map[string]any
	for _, d := range docs {
		if d.isKEDA() {
			objs = append(objs, d.obj)
		}
	}
	if len(objs) != 2 {
		t.Fatalf("found %d KEDA objects, want 2 (ScaledObject, TriggerAuthentication)", len(objs))
	}
	// Also an invalid one, to see that the validator does reject.
	broken := map[string]any{"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
		"metadata": map[string]any{"name": "broken"}, "spec": map[string]any{"maxReplicaCount": "twelve"}}
	path := filepath.Join(t.TempDir(), "keda.json")
	for _, tc := range []struct {
		objs  []map[string]any
		valid bool
	}{{objs, true}, {[]map[string]any{broken}, false}} {
		b, err := json.Marshal(tc.objs)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		argv := kedaValidate(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		out, err := run(ctx, "", nil, argv[0], append(argv[1:], path)...)
		cancel()
		t.Logf("%s validator:\n%s", kedaModelsPkg, out)
		if tc.valid && err != nil {
			t.Errorf("KEDA objects do not validate: %v", err)
		}
		if !tc.valid && (err == nil || !strings.Contains(out, "maxReplicaCount")) {
			t.Errorf("the validator accepted an invalid ScaledObject (err %v)", err)
		}
	}
}

// Kubernetes objects, with the fields the cross-checks read (not strict:
// the schemas check the rest).
type statefulSet struct {
	Spec struct {
		Replicas    *int32 `yaml:"replicas"`
		ServiceName string `yaml:"serviceName"`
		Selector    struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		Template struct {
			Metadata struct {
				Labels map[string]string `yaml:"labels"`
			} `yaml:"metadata"`
			Spec struct {
				TerminationGracePeriodSeconds *int64 `yaml:"terminationGracePeriodSeconds"`
				SecurityContext               struct {
					RunAsNonRoot *bool  `yaml:"runAsNonRoot"`
					RunAsUser    *int64 `yaml:"runAsUser"`
				} `yaml:"securityContext"`
				Containers []container `yaml:"containers"`
				Volumes    []struct {
					Name      string `yaml:"name"`
					ConfigMap *struct {
						Name string `yaml:"name"`
					} `yaml:"configMap"`
				} `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
		VolumeClaimTemplates []struct {
			Metadata struct {
				Name string `yaml:"name"`
			} `yaml:"metadata"`
		} `yaml:"volumeClaimTemplates"`
	} `yaml:"spec"`
}

type container struct {
	Name    string   `yaml:"name"`
	Image   string   `yaml:"image"`
	Command []string `yaml:"command"`
	Args    []string `yaml:"args"`
	Env     []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom struct {
			FieldRef *struct {
				FieldPath string `yaml:"fieldPath"`
			} `yaml:"fieldRef"`
			SecretKeyRef *struct {
				Name string `yaml:"name"`
				Key  string `yaml:"key"`
			} `yaml:"secretKeyRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	StartupProbe   *probe `yaml:"startupProbe"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	Resources      struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	SecurityContext struct {
		ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
	} `yaml:"securityContext"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
}

type probe struct {
	HTTPGet struct {
		Path string `yaml:"path"`
		Port any    `yaml:"port"`
	} `yaml:"httpGet"`
}

// decodeLoose decodes d into v, ignoring fields v lacks.
func decodeLoose(t *testing.T, d doc, v any) {
	t.Helper()
	if err := yaml.Unmarshal(d.raw, v); err != nil {
		t.Fatalf("%s: %s %s: %v", d.file, d.kind(), d.name(), err)
	}
}

// loadBraidYAML loads the ConfigMap's braid.yaml with braid's own loader,
// with the environment the StatefulSet gives it.
func loadBraidYAML(t *testing.T, docs []doc) *job.Config {
	t.Helper()
	path := filepath.Join(t.TempDir(), "braid.yaml")
	if err := os.WriteFile(path, []byte(braidYAML(t, docs)), 0o600); err != nil {
		t.Fatal(err)
	}
	// Only what the StatefulSet sets; the make test broker's address must
	// not override the file's.
	for k, v := range map[string]string{
		"BRAID_KAFKA_BROKERS": "", "BRAID_GROUP": "", "BRAID_STATE_DIR": "",
		"BRAID_INSTANCE_ID":   "braid-0",
		kafka.EnvSASLUsername: "braid-from-secret",
		kafka.EnvSASLPassword: "password-from-secret",
	} {
		t.Setenv(k, v)
	}
	cfg, err := job.LoadConfig(path)
	if cfg == nil {
		t.Fatalf("job.LoadConfig(ConfigMap braid.yaml): %v", err)
	}
	// The SASL credentials come from the environment. Once job.applyEnv
	// calls Kafka.ApplyEnv this is a no-op, and LoadConfig's err is nil.
	cfg.Kafka.ApplyEnv(os.Getenv)
	if err := cfg.Validate(); err != nil {
		t.Fatalf("ConfigMap braid.yaml does not validate: %v", err)
	}
	if err := cfg.Kafka.Prepare(); err != nil {
		t.Fatalf("ConfigMap braid.yaml: Kafka.Prepare: %v", err)
	}
	if cfg.Kafka.SASL.Username != "braid-from-secret" || cfg.Kafka.SASL.Password != "password-from-secret" {
		t.Errorf("SASL credentials not from the environment: %v", cfg.Kafka.SASL)
	}
	return cfg
}

// TestManifestsAgree loads the ConfigMap's braid.yaml with braid's loader and
// checks that the manifests agree with it and with each other.
func TestManifestsAgree(t *testing.T) {
	_, docs := manifests(t)
	cfg := loadBraidYAML(t, docs)

	// braid.yaml itself.
	if cfg.InstanceID != "braid-0" {
		t.Errorf("instance_id = %q, want it from BRAID_INSTANCE_ID", cfg.InstanceID)
	}
	if !cfg.Kafka.TLS.Enabled || cfg.Kafka.SASL.Mechanism == "" {
		t.Errorf("kafka: tls %+v, sasl %v: want TLS and SASL on", cfg.Kafka.TLS, cfg.Kafka.SASL)
	}
	var file struct {
		Kafka struct {
			SASL map[string]any `yaml:"sasl"`
		} `yaml:"kafka"`
	}
	if err := yaml.Unmarshal([]byte(braidYAML(t, docs)), &file); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"username", "password"} {
		if _, ok := file.Kafka.SASL[k]; ok {
			t.Errorf("braid.yaml sets kafka.sasl.%s: it must come from the Secret", k)
		}
	}
	host, port, err := net.SplitHostPort(cfg.Admin.Addr)
	if err != nil || host != "0.0.0.0" {
		t.Fatalf("admin.addr = %q, want 0.0.0.0:<port> so that the kubelet's probes reach it", cfg.Admin.Addr)
	}
	adminPort, _ := strconv.Atoi(port)

	// StatefulSet.
	var ss statefulSet
	decodeLoose(t, find(t, docs, "StatefulSet", "braid"), &ss)
	spec := ss.Spec.Template.Spec
	if ss.Spec.Replicas != nil {
		t.Error("StatefulSet sets replicas: the autoscaler owns them")
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("StatefulSet has %d containers, want 1", len(spec.Containers))
	}
	c := spec.Containers[0]
	if cmd := strings.Join(append(c.Command, c.Args...), " "); cmd != "braid run --config /etc/braid/braid.yaml" {
		t.Errorf("command = %q", cmd)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom.FieldRef != nil:
			env[e.Name] = "field:" + e.ValueFrom.FieldRef.FieldPath
		case e.ValueFrom.SecretKeyRef != nil:
			env[e.Name] = "secret:" + e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
		default:
			env[e.Name] = e.Value
		}
	}
	for name, want := range map[string]string{
		"BRAID_INSTANCE_ID":   "field:metadata.name",
		kafka.EnvSASLUsername: "secret:braid-kafka/username",
		kafka.EnvSASLPassword: "secret:braid-kafka/password",
	} {
		if env[name] != want {
			t.Errorf("env %s = %q, want %q", name, env[name], want)
		}
	}
	var adminName string
	for _, p := range c.Ports {
		if p.ContainerPort == adminPort {
			adminName = p.Name
		}
	}
	if adminName == "" {
		t.Errorf("no container port %d (admin.addr)", adminPort)
	}
	for _, pr := range []struct {
		name string
		p    *probe
		path string
	}{{"startupProbe", c.StartupProbe, "/healthz"}, {"livenessProbe", c.LivenessProbe, "/healthz"}, {"readinessProbe", c.ReadinessProbe, "/readyz"}} {
		if pr.p == nil {
			t.Errorf("no %s", pr.name)
			continue
		}
		if pr.p.HTTPGet.Path != pr.path || (pr.p.HTTPGet.Port != adminName && pr.p.HTTPGet.Port != adminPort) {
			t.Errorf("%s = %s on %v, want %s on the admin port", pr.name, pr.p.HTTPGet.Path, pr.p.HTTPGet.Port, pr.path)
		}
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	if mounts["state"] != cfg.State.Dir {
		t.Errorf("state volume at %q, want state.dir %q", mounts["state"], cfg.State.Dir)
	}
	if len(ss.Spec.VolumeClaimTemplates) != 1 || ss.Spec.VolumeClaimTemplates[0].Metadata.Name != "state" {
		t.Errorf("volumeClaimTemplates = %+v, want one named state", ss.Spec.VolumeClaimTemplates)
	}
	if mounts["config"] != "/etc/braid" {
		t.Errorf("config volume at %q, want /etc/braid", mounts["config"])
	}
	for _, v := range spec.Volumes {
		if v.Name == "config" && (v.ConfigMap == nil || v.ConfigMap.Name != "braid-config") {
			t.Errorf("config volume is not the ConfigMap braid-config")
		}
	}
	if sc := spec.SecurityContext; sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 {
		t.Errorf("pod securityContext %+v: want runAsNonRoot and a non-zero runAsUser", sc)
	}
	if sc := c.SecurityContext; sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("container securityContext %+v: want a read-only root and no privilege escalation", sc)
	}
	// The final checkpoint is bounded by the transaction timeout,
	// checkpoint_interval + 1m (engine.Config).
	if g := spec.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= cfg.CheckpointInterval+time.Minute {
		t.Errorf("terminationGracePeriodSeconds %v must exceed checkpoint_interval + 1m = %v", g, cfg.CheckpointInterval+time.Minute)
	}
	limit := quantity(t, c.Resources.Limits["memory"])
	if goLimit := quantity(t, strings.TrimSuffix(env["GOMEMLIMIT"], "B")); goLimit == 0 || goLimit >= limit {
		t.Errorf("GOMEMLIMIT %q must be set below the memory limit %s", env["GOMEMLIMIT"], c.Resources.Limits["memory"])
	}
	if cfg.State.MemoryBudget >= limit/2 {
		t.Errorf("state.memory_budget %d leaves too little of the memory limit %d", cfg.State.MemoryBudget, limit)
	}
	if c.Resources.Requests["cpu"] == "" || c.Resources.Requests["memory"] == "" {
		t.Errorf("resources.requests %v: want cpu and memory", c.Resources.Requests)
	}
	labels := ss.Spec.Template.Metadata.Labels
	if !subset(ss.Spec.Selector.MatchLabels, labels) {
		t.Errorf("selector %v does not match the pod labels %v", ss.Spec.Selector.MatchLabels, labels)
	}

	// The headless Service and the PodDisruptionBudget.
	var svc struct {
		Spec struct {
			ClusterIP string            `yaml:"clusterIP"`
			Selector  map[string]string `yaml:"selector"`
			Ports     []struct {
				Port       int `yaml:"port"`
				TargetPort any `yaml:"targetPort"`
			} `yaml:"ports"`
		} `yaml:"spec"`
	}
	decodeLoose(t, find(t, docs, "Service", ss.Spec.ServiceName), &svc)
	if svc.Spec.ClusterIP != "None" || !subset(svc.Spec.Selector, labels) {
		t.Errorf("Service %s: clusterIP %q selector %v: want headless, selecting the pods", ss.Spec.ServiceName, svc.Spec.ClusterIP, svc.Spec.Selector)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != adminPort {
		t.Errorf("Service ports %+v: want the admin port %d", svc.Spec.Ports, adminPort)
	}
	var pdb struct {
		Spec struct {
			MaxUnavailable any `yaml:"maxUnavailable"`
			Selector       struct {
				MatchLabels map[string]string `yaml:"matchLabels"`
			} `yaml:"selector"`
		} `yaml:"spec"`
	}
	decodeLoose(t, find(t, docs, "PodDisruptionBudget", "braid"), &pdb)
	if pdb.Spec.MaxUnavailable != 1 || !subset(pdb.Spec.Selector.MatchLabels, labels) {
		t.Errorf("PodDisruptionBudget: maxUnavailable %v selector %v", pdb.Spec.MaxUnavailable, pdb.Spec.Selector.MatchLabels)
	}

	// The Secret example has the keys the StatefulSet and KEDA read.
	var secret struct {
		StringData map[string]string `yaml:"stringData"`
	}
	decodeLoose(t, find(t, docs, "Secret", "braid-kafka"), &secret)
	for _, k := range []string{"username", "password"} {
		if _, ok := secret.StringData[k]; !ok {
			t.Errorf("secret-example.yaml lacks the key %s", k)
		}
	}

	// KEDA: strictly decoded, and in step with braid.yaml.
	var so scaledObject
	find(t, docs, "ScaledObject", "braid").decode(t, &so)
	if r := so.Spec.ScaleTargetRef; r.APIVersion != "apps/v1" || r.Kind != "StatefulSet" || r.Name != "braid" {
		t.Errorf("ScaledObject scaleTargetRef = %+v", r)
	}
	if so.Spec.MinReplicaCount == nil || *so.Spec.MinReplicaCount < 1 || so.Spec.MaxReplicaCount == nil {
		t.Fatalf("ScaledObject replica bounds %v..%v", so.Spec.MinReplicaCount, so.Spec.MaxReplicaCount)
	}
	if len(so.Spec.Triggers) != 1 || so.Spec.Triggers[0].Type != "kafka" {
		t.Fatalf("ScaledObject triggers = %+v, want one kafka trigger", so.Spec.Triggers)
	}
	tr := so.Spec.Triggers[0]
	for k := range tr.Metadata {
		if !slices.Contains(kafkaScalerMetadata, k) {
			t.Errorf("kafka trigger metadata %q is not a parameter of KEDA's Kafka scaler", k)
		}
	}
	for k, want := range map[string]string{
		"bootstrapServers":  strings.Join(cfg.Kafka.Brokers, ","),
		"consumerGroup":     cfg.Group,
		"topic":             cfg.Inputs.Spans.Topic,
		"offsetResetPolicy": "earliest",
		"sasl":              kedaSASL[strings.ToUpper(cfg.Kafka.SASL.Mechanism)],
		"tls":               map[bool]string{true: "enable", false: "disable"}[cfg.Kafka.TLS.Enabled],
	} {
		if tr.Metadata[k] != want {
			t.Errorf("kafka trigger %s = %q, want %q (from braid.yaml)", k, tr.Metadata[k], want)
		}
	}
	var ta triggerAuthentication
	find(t, docs, "TriggerAuthentication", tr.AuthenticationRef.Name).decode(t, &ta)
	refs := map[string]string{}
	for _, r := range ta.Spec.SecretTargetRef {
		if !slices.Contains(kafkaScalerAuthParams, r.Parameter) {
			t.Errorf("TriggerAuthentication parameter %q is not one of the Kafka scaler's", r.Parameter)
		}
		refs[r.Parameter] = "secret:" + r.Name + "/" + r.Key
	}
	if refs["username"] != env[kafka.EnvSASLUsername] || refs["password"] != env[kafka.EnvSASLPassword] {
		t.Errorf("TriggerAuthentication reads %v, braid reads %s and %s", refs, env[kafka.EnvSASLUsername], env[kafka.EnvSASLPassword])
	}

	// The HPA alternative scales the same target within the same bounds.
	var hpa struct {
		Spec struct {
			ScaleTargetRef struct {
				Kind string `yaml:"kind"`
				Name string `yaml:"name"`
			} `yaml:"scaleTargetRef"`
			MinReplicas int32 `yaml:"minReplicas"`
			MaxReplicas int32 `yaml:"maxReplicas"`
			Metrics     []struct {
				Type     string `yaml:"type"`
				External struct {
					Metric struct {
						Name     string `yaml:"name"`
						Selector struct {
							MatchLabels map[string]string `yaml:"matchLabels"`
						} `yaml:"selector"`
					} `yaml:"metric"`
					Target struct {
						Type         string `yaml:"type"`
						AverageValue string `yaml:"averageValue"`
					} `yaml:"target"`
				} `yaml:"external"`
			} `yaml:"metrics"`
		} `yaml:"spec"`
	}
	decodeLoose(t, find(t, docs, "HorizontalPodAutoscaler", "braid"), &hpa)
	if hpa.Spec.ScaleTargetRef.Kind != "StatefulSet" || hpa.Spec.ScaleTargetRef.Name != "braid" ||
		hpa.Spec.MinReplicas != *so.Spec.MinReplicaCount || hpa.Spec.MaxReplicas != *so.Spec.MaxReplicaCount {
		t.Errorf("HPA %+v does not match the ScaledObject (%d..%d)", hpa.Spec, *so.Spec.MinReplicaCount, *so.Spec.MaxReplicaCount)
	}
	if len(hpa.Spec.Metrics) != 1 {
		t.Fatalf("HPA metrics = %+v, want one", hpa.Spec.Metrics)
	}
	m := hpa.Spec.Metrics[0]
	if m.Type != "External" || m.External.Metric.Name != "braid_consumer_lag_records" ||
		m.External.Metric.Selector.MatchLabels["topic"] != cfg.Inputs.Spans.Topic ||
		m.External.Target.Type != "AverageValue" || m.External.Target.AverageValue != tr.Metadata["lagThreshold"] {
		t.Errorf("HPA metric %+v: want External braid_consumer_lag_records{topic=%s}, AverageValue = lagThreshold %s",
			m, cfg.Inputs.Spans.Topic, tr.Metadata["lagThreshold"])
	}
}

// braidYAML returns the ConfigMap's braid.yaml.
func braidYAML(t *testing.T, docs []doc) string {
	t.Helper()
	var cm struct {
		Data map[string]string `yaml:"data"`
	}
	decodeLoose(t, find(t, docs, "ConfigMap", "braid-config"), &cm)
	text, ok := cm.Data["braid.yaml"]
	if !ok {
		t.Fatal("ConfigMap braid-config has no braid.yaml")
	}
	return text
}

func subset(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

var quantityRE = regexp.MustCompile(`^([0-9]+)(Ki|Mi|Gi|Ti)?$`)

// quantity parses a Kubernetes binary quantity (or a GOMEMLIMIT value).
func quantity(t *testing.T, s string) int64 {
	t.Helper()
	m := quantityRE.FindStringSubmatch(s)
	if m == nil {
		t.Errorf("cannot parse the quantity %q", s)
		return 0
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n << map[string]uint{"": 0, "Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40}[m[2]]
}

// The Kafka exporter's settings (opentelemetry-collector-contrib
// exporter/kafkaexporter, v0.165), to catch misspelt keys.
var (
	exporterKeys = []string{
		"brokers", "protocol_version", "resolve_canonical_bootstrap_servers_only", "client_id", "conn_idle_timeout",
		"logs", "metrics", "traces", "profiles", "topic_from_attribute", "include_metadata_keys", "record_headers",
		"partition_traces_by_id", "partition_metrics_by_resource_attributes", "partition_logs_by_resource_attributes",
		"partition_logs_by_trace_id", "record_partitioner", "signal_header", "tls", "auth", "metadata", "timeout",
		"retry_on_failure", "sending_queue", "producer",
	}
	signalKeys   = []string{"topic", "encoding", "topic_from_metadata_key", "message_key_from_metadata_key"}
	producerKeys = []string{"max_message_bytes", "max_broker_write_bytes", "required_acks", "compression",
		"compression_params", "flush_max_messages", "allow_auto_topic_creation", "linger"}
	saslKeys = []string{"username", "password", "mechanism", "version", "aws_msk", "oauthbearer_token_source"}
)

// TestCollectorConfig parses deploy/collector/otel-collector.yaml and checks
// that its Kafka exporter writes what braid's ConfigMap reads, keyed as
// braid's fast path wants, and that the pipelines are whole.
func TestCollectorConfig(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("collector", "otel-collector.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Receivers  map[string]any `yaml:"receivers"`
		Processors map[string]any `yaml:"processors"`
		Exporters  map[string]any `yaml:"exporters"`
		Extensions map[string]any `yaml:"extensions"`
		Connectors map[string]any `yaml:"connectors"`
		Service    struct {
			Extensions []string `yaml:"extensions"`
			Pipelines  map[string]struct {
				Receivers  []string `yaml:"receivers"`
				Processors []string `yaml:"processors"`
				Exporters  []string `yaml:"exporters"`
			} `yaml:"pipelines"`
		} `yaml:"service"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		t.Fatalf("otel-collector.yaml: %v", err)
	}
	// The Collector expands $VAR and ${env:VAR}; a literal $ must be $$.
	for _, m := range regexp.MustCompile(`\$[^{$]|\$\{[^}]*\}`).FindAllString(string(b), -1) {
		if !regexp.MustCompile(`^\$\{env:[A-Z_][A-Z0-9_]*\}$`).MatchString(m) {
			t.Errorf("otel-collector.yaml: %q would be expanded by the Collector", m)
		}
	}

	// Pipelines use defined components, and feed the three signals to kafka.
	for name, p := range c.Service.Pipelines {
		for _, r := range p.Receivers {
			if _, ok := c.Receivers[r]; !ok {
				t.Errorf("pipeline %s: receiver %s is not defined", name, r)
			}
		}
		for _, pr := range p.Processors {
			if _, ok := c.Processors[pr]; !ok {
				t.Errorf("pipeline %s: processor %s is not defined", name, pr)
			}
		}
		for _, e := range p.Exporters {
			if _, ok := c.Exporters[e]; !ok {
				t.Errorf("pipeline %s: exporter %s is not defined", name, e)
			}
		}
		if !slices.Contains(p.Processors, "batch") {
			t.Errorf("pipeline %s has no batch processor", name)
		}
	}
	for _, sig := range []string{"traces", "logs", "metrics"} {
		p, ok := c.Service.Pipelines[sig]
		if !ok || !slices.Contains(p.Exporters, "kafka") || !slices.Contains(p.Receivers, "otlp") {
			t.Errorf("no %s pipeline from otlp to kafka", sig)
		}
	}
	if !slices.Contains(c.Service.Pipelines["metrics"].Receivers, "prometheus") {
		t.Error("the metrics pipeline does not take the prometheus receiver")
	}

	// The prometheus receiver scrapes vLLM and DCGM.
	var prom struct {
		Config struct {
			ScrapeConfigs []struct {
				JobName       string `yaml:"job_name"`
				StaticConfigs []struct {
					Targets []string `yaml:"targets"`
				} `yaml:"static_configs"`
			} `yaml:"scrape_configs"`
		} `yaml:"config"`
	}
	remarshal(t, c.Receivers["prometheus"], &prom)
	jobs := map[string]int{}
	for _, sc := range prom.Config.ScrapeConfigs {
		for _, s := range sc.StaticConfigs {
			for _, tg := range s.Targets {
				if _, _, err := net.SplitHostPort(tg); err != nil {
					t.Errorf("scrape job %s: target %q is not host:port", sc.JobName, tg)
				}
				jobs[sc.JobName]++
			}
		}
	}
	if jobs["vllm"] == 0 || jobs["dcgm-exporter"] == 0 {
		t.Errorf("scrape jobs %v: want vllm and dcgm-exporter with targets", jobs)
	}

	// The Kafka exporter.
	raw, ok := c.Exporters["kafka"].(map[string]any)
	if !ok {
		t.Fatal("no kafka exporter")
	}
	unknown(t, "exporters.kafka", raw, exporterKeys)
	for _, sig := range []string{"traces", "logs", "metrics"} {
		m, _ := raw[sig].(map[string]any)
		unknown(t, "exporters.kafka."+sig, m, signalKeys)
	}
	p, _ := raw["producer"].(map[string]any)
	unknown(t, "exporters.kafka.producer", p, producerKeys)
	auth, _ := raw["auth"].(map[string]any)
	sasl, _ := auth["sasl"].(map[string]any)
	unknown(t, "exporters.kafka.auth.sasl", sasl, saslKeys)

	var exp struct {
		Brokers []string `yaml:"brokers"`
		Traces  struct {
			Topic, Encoding string
		} `yaml:"traces"`
		Logs struct {
			Topic, Encoding string
		} `yaml:"logs"`
		Metrics struct {
			Topic, Encoding string
		} `yaml:"metrics"`
		PartitionTracesByID               bool `yaml:"partition_traces_by_id"`
		PartitionLogsByTraceID            bool `yaml:"partition_logs_by_trace_id"`
		PartitionLogsByResourceAttributes bool `yaml:"partition_logs_by_resource_attributes"`
		RecordPartitioner                 struct {
			StickyKey struct {
				Hasher string `yaml:"hasher"`
			} `yaml:"sticky_key"`
		} `yaml:"record_partitioner"`
		Producer struct {
			AllowAutoTopicCreation *bool `yaml:"allow_auto_topic_creation"`
		} `yaml:"producer"`
		Auth struct {
			SASL struct {
				Mechanism string `yaml:"mechanism"`
			} `yaml:"sasl"`
		} `yaml:"auth"`
		TLS map[string]any `yaml:"tls"`
	}
	remarshal(t, raw, &exp)
	if !exp.PartitionTracesByID || !exp.PartitionLogsByTraceID || exp.PartitionLogsByResourceAttributes {
		t.Errorf("partition_traces_by_id %v, partition_logs_by_trace_id %v, partition_logs_by_resource_attributes %v: want true, true, false",
			exp.PartitionTracesByID, exp.PartitionLogsByTraceID, exp.PartitionLogsByResourceAttributes)
	}
	if exp.RecordPartitioner.StickyKey.Hasher != "sarama_compat" {
		t.Errorf("record_partitioner.sticky_key.hasher = %q, want sarama_compat (braid routes tasks by it)", exp.RecordPartitioner.StickyKey.Hasher)
	}
	if a := exp.Producer.AllowAutoTopicCreation; a == nil || *a {
		t.Error("producer.allow_auto_topic_creation must be false: braid needs the input topics co-partitioned")
	}

	// In step with braid's ConfigMap.
	_, docs := manifests(t)
	cfg := loadBraidYAML(t, docs)
	for _, s := range []struct {
		sig, topic, enc string
		in              job.InputConfig
	}{
		{"traces", exp.Traces.Topic, exp.Traces.Encoding, cfg.Inputs.Spans},
		{"logs", exp.Logs.Topic, exp.Logs.Encoding, cfg.Inputs.Logs},
		{"metrics", exp.Metrics.Topic, exp.Metrics.Encoding, cfg.Inputs.Metrics},
	} {
		if s.topic != s.in.Topic || s.enc != s.in.Encoding {
			t.Errorf("exporter %s writes %s as %s; braid reads %s as %s", s.sig, s.topic, s.enc, s.in.Topic, s.in.Encoding)
		}
	}
	if !slices.Equal(exp.Brokers, cfg.Kafka.Brokers) {
		t.Errorf("exporter brokers %v, braid's %v", exp.Brokers, cfg.Kafka.Brokers)
	}
	if !strings.EqualFold(exp.Auth.SASL.Mechanism, cfg.Kafka.SASL.Mechanism) || (exp.TLS != nil) != cfg.Kafka.TLS.Enabled {
		t.Errorf("exporter SASL %q TLS %v; braid's %q %v", exp.Auth.SASL.Mechanism, exp.TLS != nil, cfg.Kafka.SASL.Mechanism, cfg.Kafka.TLS.Enabled)
	}
}

func unknown(t *testing.T, where string, m map[string]any, known []string) {
	t.Helper()
	if m == nil {
		t.Errorf("%s is missing", where)
		return
	}
	for k := range m {
		if !slices.Contains(known, k) {
			t.Errorf("%s.%s is not a setting of the Kafka exporter", where, k)
		}
	}
}

func remarshal(t *testing.T, in, out any) {
	t.Helper()
	b, err := yaml.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, out); err != nil {
		t.Fatal(fmt.Errorf("remarshal: %w", err))
	}
}
