package deploytest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/tally-dev/tally/internal/cliutil"
	"github.com/tally-dev/tally/internal/natsperm"
	tallynode "github.com/tally-dev/tally/node"
)

// render renders dir, failing the test on an error, and indexes the
// objects by kind and name (one namespace per region).
func render(t *testing.T, dir string) map[string]Object {
	t.Helper()
	objs, err := Kustomize(dir)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]Object{}
	for _, o := range objs {
		key := o.Kind() + "/" + o.Name()
		if _, dup := byName[key]; dup {
			t.Fatalf("%s: %s twice", dir, key)
		}
		byName[key] = o
	}
	return byName
}

// k8sWorkload is what TestKustomize reads of a StatefulSet or Deployment.
type k8sWorkload struct {
	Metadata struct {
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Spec struct {
		Replicas int `yaml:"replicas"`
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		Template struct {
			Metadata struct {
				Labels map[string]string `yaml:"labels"`
			} `yaml:"metadata"`
			Spec struct {
				SecurityContext struct {
					RunAsNonRoot   bool `yaml:"runAsNonRoot"`
					SeccompProfile struct {
						Type string `yaml:"type"`
					} `yaml:"seccompProfile"`
				} `yaml:"securityContext"`
				Containers []struct {
					Name            string `yaml:"name"`
					SecurityContext struct {
						AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
						ReadOnlyRootFilesystem   bool  `yaml:"readOnlyRootFilesystem"`
						Capabilities             struct {
							Drop []string `yaml:"drop"`
						} `yaml:"capabilities"`
					} `yaml:"securityContext"`
					Resources struct {
						Requests map[string]string `yaml:"requests"`
						Limits   map[string]string `yaml:"limits"`
					} `yaml:"resources"`
				} `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

// TestKustomize renders each region's overlay (deploy/k8s/overlays/*)
// and checks what a platform team asks of it: every pod passes the
// restricted Pod Security Standard and has requests and a memory limit,
// NATS included; a PodDisruptionBudget and a NetworkPolicy cover every
// workload and the namespace denies by default; a ServiceMonitor scrapes
// tally as the job the alerts expect; and each pod of tally's
// StatefulSet runs as its own replica with its own NATS user, whose
// password it reads from the same Secret key the region's nats-servers
// check it against (configs/nats/<region>.conf, from internal/natsperm).
func TestKustomize(t *testing.T) {
	overlays, err := k8sOverlays(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	var regions []string
	for _, dir := range overlays {
		regions = append(regions, filepath.Base(dir))
	}
	shipped := map[string][]string{}
	for _, r := range natsperm.Shipped {
		shipped[r.Name] = r.Replicas
	}
	if !slices.Equal(slices.Sorted(slices.Values(regions)), slices.Sorted(func(yield func(string) bool) {
		for r := range shipped {
			if !yield(r) {
				return
			}
		}
	})) {
		t.Fatalf("overlays %v, internal/natsperm's shipped regions %v: one overlay a region", regions, natsperm.Shipped)
	}

	for _, dir := range overlays {
		region := filepath.Base(dir)
		ns := "tally-" + region
		objs := render(t, dir)
		for _, o := range objs {
			if o.Kind() != "Namespace" && o.Namespace() != ns {
				t.Errorf("%s: %s in namespace %q, want %s", region, o.ID(), o.Namespace(), ns)
			}
		}
		var nsObj struct {
			Metadata struct {
				Labels map[string]string `yaml:"labels"`
			} `yaml:"metadata"`
		}
		if err := objs["Namespace/"+ns].Decode(&nsObj); err != nil || nsObj.Metadata.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
			t.Errorf("%s: Namespace %s does not enforce the restricted Pod Security Standard (%v)", region, ns, err)
		}

		workloads := []string{"StatefulSet/tally", "StatefulSet/nats"}
		if region == "us" { // alloc_cluster
			workloads = append(workloads, "Deployment/lease-authority")
		} else if _, ok := objs["Deployment/lease-authority"]; ok {
			t.Errorf("%s: a lease authority outside the allocator's region", region)
		}
		pdbs, policies := objsOf(t, objs, "PodDisruptionBudget"), objsOf(t, objs, "NetworkPolicy")
		wl := map[string]k8sWorkload{}
		for _, name := range workloads {
			o, ok := objs[name]
			if !ok {
				t.Errorf("%s: no %s", region, name)
				continue
			}
			var w k8sWorkload
			if err := o.Decode(&w); err != nil {
				t.Fatal(err)
			}
			wl[name] = w
			ps := w.Spec.Template.Spec
			if !ps.SecurityContext.RunAsNonRoot || ps.SecurityContext.SeccompProfile.Type != "RuntimeDefault" {
				t.Errorf("%s: %s: pod securityContext %+v: want runAsNonRoot and seccomp RuntimeDefault", region, name, ps.SecurityContext)
			}
			for _, c := range ps.Containers {
				sc := c.SecurityContext
				if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || !sc.ReadOnlyRootFilesystem || !slices.Equal(sc.Capabilities.Drop, []string{"ALL"}) {
					t.Errorf("%s: %s container %s: securityContext %+v: want no privilege escalation, a read-only root, all capabilities dropped", region, name, c.Name, sc)
				}
				if c.Resources.Requests["cpu"] == "" || c.Resources.Requests["memory"] == "" || c.Resources.Limits["memory"] == "" {
					t.Errorf("%s: %s container %s: resources %+v: want cpu and memory requests and a memory limit", region, name, c.Name, c.Resources)
				}
			}
			labels := w.Spec.Template.Metadata.Labels
			if !selects(w.Spec.Selector.MatchLabels, labels) {
				t.Errorf("%s: %s: its selector does not select its own pods", region, name)
			}
			if !slices.ContainsFunc(pdbs, func(p selector) bool { return selects(p.Spec.Selector.MatchLabels, labels) }) {
				t.Errorf("%s: %s: no PodDisruptionBudget selects its pods", region, name)
			}
			if !slices.ContainsFunc(policies, func(p selector) bool {
				return len(p.Spec.PodSelector.MatchLabels) > 0 && selects(p.Spec.PodSelector.MatchLabels, labels)
			}) {
				t.Errorf("%s: %s: no NetworkPolicy of its own", region, name)
			}
		}
		if !slices.ContainsFunc(policies, func(p selector) bool {
			return len(p.Spec.PodSelector.MatchLabels) == 0 && slices.Equal(p.Spec.PolicyTypes, []string{"Ingress", "Egress"}) && p.Spec.Ingress == nil && p.Spec.Egress == nil
		}) {
			t.Errorf("%s: no NetworkPolicy denies by default (every pod, Ingress and Egress, nothing allowed)", region)
		}
		checkServiceMonitor(t, region, objs, wl["StatefulSet/tally"].Spec.Template.Metadata.Labels)
		checkPerPodUsers(t, dir, region, objs, shipped[region])
	}

	// deploy/k8s itself: the three regions side by side, no object twice.
	all, err := Kustomize(filepath.Join(repoRoot, "deploy", "k8s"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, o := range all {
		if seen[o.ID()] {
			t.Errorf("deploy/k8s: %s twice", o.ID())
		}
		seen[o.ID()] = true
	}
	if n := len(objsOf(t, render(t, overlays[0]), "")); len(all) < n*len(overlays)-3 {
		t.Errorf("deploy/k8s renders %d objects, want about %d a region", len(all), n)
	}
}

// selector is what a PodDisruptionBudget, NetworkPolicy or
// ServiceMonitor selects with.
type selector struct {
	Metadata struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Spec struct {
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		PodSelector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"podSelector"`
		PolicyTypes []string `yaml:"policyTypes"`
		Ingress     []any    `yaml:"ingress"`
		Egress      []any    `yaml:"egress"`
		Ports       []struct {
			Name string `yaml:"name"`
		} `yaml:"ports"`
		Endpoints []struct {
			Port        string `yaml:"port"`
			Path        string `yaml:"path"`
			Relabelings []struct {
				Action      string `yaml:"action"`
				TargetLabel string `yaml:"targetLabel"`
				Replacement string `yaml:"replacement"`
			} `yaml:"relabelings"`
		} `yaml:"endpoints"`
	} `yaml:"spec"`
}

// objsOf decodes the objects of kind ("": all) as selectors.
func objsOf(t *testing.T, objs map[string]Object, kind string) []selector {
	t.Helper()
	var out []selector
	for _, o := range objs {
		if kind != "" && o.Kind() != kind {
			continue
		}
		var s selector
		if err := o.Decode(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// selects: every label of sel is in labels.
func selects(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return len(sel) > 0
}

// checkServiceMonitor: one ServiceMonitor selects exactly one Service
// (two would scrape every replica twice), that Service selects the tally
// pods, and the target's job is "tally", as deploy/prometheus/alerts.yml
// expects.
func checkServiceMonitor(t *testing.T, region string, objs map[string]Object, podLabels map[string]string) {
	sms := objsOf(t, objs, "ServiceMonitor")
	if len(sms) != 1 {
		t.Errorf("%s: %d ServiceMonitors, want 1", region, len(sms))
		return
	}
	sm := sms[0]
	var scraped []selector
	for _, s := range objsOf(t, objs, "Service") {
		if selects(sm.Spec.Selector.MatchLabels, s.Metadata.Labels) {
			scraped = append(scraped, s)
		}
	}
	if len(scraped) != 1 {
		t.Errorf("%s: the ServiceMonitor selects %d Services, want 1", region, len(scraped))
		return
	}
	svc := scraped[0]
	var svcSel struct {
		Spec struct {
			Selector map[string]string `yaml:"selector"`
		} `yaml:"spec"`
	}
	if err := objs["Service/"+svc.Metadata.Name].Decode(&svcSel); err != nil {
		t.Fatal(err)
	}
	if !selects(svcSel.Spec.Selector, podLabels) {
		t.Errorf("%s: Service %s does not select the tally pods", region, svc.Metadata.Name)
	}
	if len(sm.Spec.Endpoints) != 1 {
		t.Fatalf("%s: ServiceMonitor endpoints %+v", region, sm.Spec.Endpoints)
	}
	ep := sm.Spec.Endpoints[0]
	if ep.Path != "/metrics" || !slices.ContainsFunc(svc.Spec.Ports, func(p struct {
		Name string `yaml:"name"`
	}) bool {
		return p.Name == ep.Port
	}) {
		t.Errorf("%s: ServiceMonitor scrapes port %q path %q; Service %s has %+v", region, ep.Port, ep.Path, svc.Metadata.Name, svc.Spec.Ports)
	}
	job := ""
	for _, r := range ep.Relabelings {
		if r.TargetLabel == "job" && (r.Action == "" || r.Action == "replace") {
			job = r.Replacement
		}
	}
	if job != "tally" {
		t.Errorf("%s: the ServiceMonitor's targets get job %q, want tally (the alerts' job=\"tally\")", region, job)
	}
}

// checkPerPodUsers: pod tally-<n> loads tally-<n>.hcl, which names a
// replica of the region and that replica's NATS user; its
// TALLY_NATS_PASSWORD_FILE is a path of the Secret tally-nats-users
// mapped from the key the region's nats-servers read that user's
// password from, and the servers take that Secret whole. Every replica
// internal/natsperm ships for the region has exactly one pod.
func checkPerPodUsers(t *testing.T, dir, region string, objs map[string]Object, replicas []string) {
	cs, err := k8sCommands(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	rel, _ := filepath.Rel(repoRoot, dir)
	var serve []Command
	for _, c := range cs {
		if strings.HasPrefix(c.Source, filepath.ToSlash(rel)+" StatefulSet") && c.Args[0] == "serve" {
			serve = append(serve, c)
		}
	}
	var sts k8sObject
	if err := objs["StatefulSet/tally"].Decode(&sts); err != nil {
		t.Fatal(err)
	}
	if sts.Spec.Replicas == nil || len(serve) != *sts.Spec.Replicas {
		t.Fatalf("%s: %d serve command lines for StatefulSet tally (replicas %v)", region, len(serve), sts.Spec.Replicas)
	}
	var nats k8sObject
	if err := objs["StatefulSet/nats"].Decode(&nats); err != nil {
		t.Fatal(err)
	}
	natsSecrets := map[string]bool{}
	for _, c := range nats.Spec.Template.Spec.Containers {
		for _, e := range c.EnvFrom {
			if e.SecretRef != nil {
				natsSecrets[e.SecretRef.Name] = true
			}
		}
	}
	users := map[string]string{} // user -> password variable, as the region's conf has them
	var regionNames []string
	for _, r := range natsperm.Shipped {
		regionNames = append(regionNames, r.Name)
	}
	for _, u := range natsperm.Users(region, replicas, regionNames) {
		users[u.Name] = u.PasswordEnv
	}

	ran := map[string]string{} // replica -> pod
	for i, c := range serve {
		pod := fmt.Sprintf("tally-%d", i)
		if !strings.Contains(c.Source, " pod "+pod+" ") {
			t.Errorf("%s: command %d is %s, want pod %s", region, i, c.Source, pod)
		}
		want := "/etc/tally/config/" + pod + ".hcl"
		if !slices.Equal(c.Args, []string{"serve", "--config", want}) {
			t.Errorf("%s: pod %s runs %q, want serve --config %s", region, pod, c.Args, want)
		}
		hcl, ok := c.Files[want]
		if !ok {
			t.Errorf("%s: pod %s: no %s in ConfigMap tallyd-config (%v)", region, pod, want, keys(c.Files))
			continue
		}
		f := filepath.Join(t.TempDir(), pod+".hcl")
		if err := os.WriteFile(f, hcl, 0o600); err != nil {
			t.Fatal(err)
		}
		cfg := tallynode.DefaultConfig()
		if err := cliutil.DecodeHCLFile(f, &cfg); err != nil {
			t.Fatal(err)
		}
		if cfg.Region != region || !slices.Contains(replicas, cfg.Replica) {
			t.Errorf("%s: pod %s is replica %q of region %q: want one of %v", region, pod, cfg.Replica, cfg.Region, replicas)
		}
		if other, dup := ran[cfg.Replica]; dup {
			t.Errorf("%s: pods %s and %s both run replica %s", region, other, pod, cfg.Replica)
		}
		ran[cfg.Replica] = pod
		if cfg.NATSUser != natsperm.ReplicaUser(cfg.Replica) {
			t.Errorf("%s: pod %s (replica %s) connects as NATS user %q, want its own, %s", region, pod, cfg.Replica, cfg.NATSUser, natsperm.ReplicaUser(cfg.Replica))
		}
		pwEnv := users[cfg.NATSUser]
		if pwEnv == "" {
			t.Errorf("%s: pod %s: NATS user %q is not in configs/nats/%s.conf", region, pod, cfg.NATSUser, region)
			continue
		}
		if slices.Contains(c.Env, cliutil.EnvNATSPassword) {
			t.Errorf("%s: pod %s: %s set: every pod of the StatefulSet would share it", region, pod, cliutil.EnvNATSPassword)
		}
		file := c.EnvValues[cliutil.EnvNATSPassword+cliutil.FileSuffix]
		if file != "/etc/tally/nats-users/"+pod {
			t.Errorf("%s: pod %s: %s%s=%q, want /etc/tally/nats-users/%s", region, pod, cliutil.EnvNATSPassword, cliutil.FileSuffix, file, pod)
		}
		// The file's Secret key is the variable the servers read.
		key, secret := secretKeyAt(sts.Spec.Template.Spec, c, file)
		if key != pwEnv || !natsSecrets[secret] {
			t.Errorf("%s: pod %s reads its password from Secret %q key %q; the nats-servers check user %s against %s from Secrets %v",
				region, pod, secret, key, cfg.NATSUser, pwEnv, slices.Sorted(func(yield func(string) bool) {
					for s := range natsSecrets {
						if !yield(s) {
							return
						}
					}
				}))
		}
		for _, tok := range []string{"TALLY_WRITE_TOKEN", "TALLY_ADMIN_TOKEN"} {
			if f := c.EnvValues[tok+cliutil.FileSuffix]; !slices.Contains(c.SecretFiles, f) {
				t.Errorf("%s: pod %s: %s%s=%q is no mounted Secret key (%v)", region, pod, tok, cliutil.FileSuffix, f, c.SecretFiles)
			}
		}
	}
	for _, r := range replicas {
		if _, ok := ran[r]; !ok {
			t.Errorf("%s: replica %s (internal/natsperm) has no pod", region, r)
		}
	}
}

// secretKeyAt is the Secret and key a pod finds at path file.
func secretKeyAt(pod podSpec, c Command, file string) (key, secret string) {
	var ct container
	for _, x := range pod.Containers {
		if strings.HasSuffix(c.Source, " container "+x.Name) {
			ct = x
		}
	}
	for _, m := range ct.VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name != m.Name || v.Secret == nil {
				continue
			}
			for _, it := range v.Secret.Items {
				if filepath.Join(m.MountPath, it.Path) == file {
					return it.Key, v.Secret.SecretName
				}
			}
		}
	}
	return "", ""
}

// TestKustomizeMatchesKubectl renders every kustomization of deploy/k8s
// with kustomize itself (kustomize build, or kubectl kustomize) and
// compares its objects with Kustomize's, so the renderer the tests use
// cannot drift from what `kubectl apply -k` applies. Skipped where
// neither is installed (CI installs neither: Kustomize is the check
// there).
func TestKustomizeMatchesKubectl(t *testing.T) {
	var cmd []string
	if p, err := exec.LookPath("kustomize"); err == nil {
		cmd = []string{p, "build"}
	} else if p, err := exec.LookPath("kubectl"); err == nil {
		cmd = []string{p, "kustomize"}
	} else {
		t.Skip("neither kustomize nor kubectl installed: deploy/k8s is rendered by Kustomize only")
	}
	overlays, err := k8sOverlays(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range append(overlays, filepath.Join(repoRoot, "deploy", "k8s")) {
		// Bounded: an installed kubectl may be a wrapper that reaches for
		// a cloud SDK; a render that hangs fails instead of stalling CI.
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		out, err := exec.CommandContext(ctx, cmd[0], append(cmd[1:], dir)...).Output()
		cancel()
		if err != nil {
			t.Fatalf("%q %s: %v", cmd, dir, err)
		}
		theirs := map[string]any{}
		dec := yaml.NewDecoder(strings.NewReader(string(out)))
		for {
			var o map[string]any
			if dec.Decode(&o) != nil {
				break
			}
			theirs[Object(o).ID()] = canonical(o)
		}
		objs, err := Kustomize(dir)
		if err != nil {
			t.Fatal(err)
		}
		ours := map[string]any{}
		for _, o := range objs {
			ours[o.ID()] = canonical(map[string]any(o))
		}
		if len(ours) != len(theirs) {
			t.Errorf("%s: %d objects, %q renders %d", dir, len(ours), cmd, len(theirs))
		}
		for id, o := range ours {
			if !reflect.DeepEqual(o, theirs[id]) {
				a, _ := yaml.Marshal(o)
				b, _ := yaml.Marshal(theirs[id])
				t.Errorf("%s: %s differs from %q's:\n--- ours\n%s\n--- theirs\n%s", dir, id, cmd, a, b)
			}
		}
	}
}

// canonical orders lists of named items by name (kustomize moves a
// patched item first; the order of volumes or containers means nothing)
// so that two renderings compare by content. env keeps its order: a
// $(VAR) refers to earlier entries.
func canonical(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if l, ok := e.([]any); ok && k != "env" && allNamed(l) {
				slices.SortFunc(l, func(a, b any) int {
					return strings.Compare(fmt.Sprint(a.(map[string]any)["name"]), fmt.Sprint(b.(map[string]any)["name"]))
				})
			}
			x[k] = canonical(e)
		}
	case []any:
		for i := range x {
			x[i] = canonical(x[i])
		}
	}
	return v
}
