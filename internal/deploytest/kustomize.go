package deploytest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Object is one Kubernetes object, as YAML decodes it.
type Object map[string]any

// Kind, Name and Namespace read the object's identity.
func (o Object) Kind() string      { s, _ := o["kind"].(string); return s }
func (o Object) Name() string      { s, _ := o.meta()["name"].(string); return s }
func (o Object) Namespace() string { s, _ := o.meta()["namespace"].(string); return s }

func (o Object) meta() map[string]any {
	m, _ := o["metadata"].(map[string]any)
	return m
}

// ID names the object uniquely in a rendering: kind, namespace and name.
func (o Object) ID() string { return o.Kind() + " " + o.Namespace() + "/" + o.Name() }

// Decode re-decodes the object into v, a typed view of it.
func (o Object) Decode(v any) error {
	b, err := yaml.Marshal(map[string]any(o))
	if err != nil {
		return fmt.Errorf("deploytest: %s: %w", o.ID(), err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		return fmt.Errorf("deploytest: %s: %w", o.ID(), err)
	}
	return nil
}

// kustomization is the part of kustomize's Kustomization that the
// shipped deploy/k8s uses, and that Kustomize renders. A field outside
// it fails the rendering (KnownFields), so a kustomization.yaml cannot
// start using a feature the test would silently not render.
type kustomization struct {
	APIVersion       string   `yaml:"apiVersion"`
	Kind             string   `yaml:"kind"`
	Namespace        string   `yaml:"namespace"`
	Resources        []string `yaml:"resources"`
	GeneratorOptions struct {
		DisableNameSuffixHash bool `yaml:"disableNameSuffixHash"`
	} `yaml:"generatorOptions"`
	ConfigMapGenerator []struct {
		Name     string   `yaml:"name"`
		Files    []string `yaml:"files"`
		Literals []string `yaml:"literals"`
	} `yaml:"configMapGenerator"`
	Patches []struct {
		Path string `yaml:"path"`
	} `yaml:"patches"`
	Images []struct {
		Name    string `yaml:"name"`
		NewName string `yaml:"newName"`
		NewTag  string `yaml:"newTag"`
	} `yaml:"images"`
}

// Kustomize renders the kustomization in dir the way `kustomize build`
// does, for the features deploy/k8s uses: resources (files and
// directories, each rendered on its own first), configMapGenerator
// (files and literals, without name hashes), strategic-merge patches
// found by kind and name (maps merge, lists of named items merge by name,
// other lists are replaced, null deletes), namespace and images. The
// order of the objects is not kustomize's; their content is
// (TestKustomizeMatchesKubectl compares the two where kubectl runs).
func Kustomize(dir string) ([]Object, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		return nil, fmt.Errorf("deploytest: %w", err)
	}
	var k kustomization
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&k); err != nil {
		return nil, fmt.Errorf("deploytest: %s/kustomization.yaml: %w", dir, err)
	}
	var objs []Object
	for _, r := range k.Resources {
		p := filepath.Join(dir, r)
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("deploytest: %s: resource %s: %w", dir, r, err)
		}
		var more []Object
		if st.IsDir() {
			more, err = Kustomize(p)
		} else {
			more, err = readObjects(p)
		}
		if err != nil {
			return nil, err
		}
		objs = append(objs, more...)
	}
	if len(k.ConfigMapGenerator) > 0 && !k.GeneratorOptions.DisableNameSuffixHash {
		return nil, fmt.Errorf("deploytest: %s: configMapGenerator with name hashes: not rendered here (set generatorOptions.disableNameSuffixHash)", dir)
	}
	for _, g := range k.ConfigMapGenerator {
		data := map[string]any{}
		for _, f := range g.Files {
			b, err := os.ReadFile(filepath.Join(dir, f))
			if err != nil {
				return nil, fmt.Errorf("deploytest: %s: configMapGenerator %s: %w", dir, g.Name, err)
			}
			data[filepath.Base(f)] = string(b)
		}
		for _, l := range g.Literals {
			key, val, ok := strings.Cut(l, "=")
			if !ok {
				return nil, fmt.Errorf("deploytest: %s: configMapGenerator %s: literal %q is not KEY=VALUE", dir, g.Name, l)
			}
			data[key] = val
		}
		objs = append(objs, Object{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": g.Name}, "data": data})
	}
	for _, p := range k.Patches {
		patches, err := readObjects(filepath.Join(dir, p.Path))
		if err != nil {
			return nil, err
		}
		for _, patch := range patches {
			i := slices.IndexFunc(objs, func(o Object) bool { return o.Kind() == patch.Kind() && o.Name() == patch.Name() })
			if i < 0 {
				return nil, fmt.Errorf("deploytest: %s: patch %s: no %s %s to patch", dir, p.Path, patch.Kind(), patch.Name())
			}
			objs[i] = Object(mergePatch(map[string]any(objs[i]), map[string]any(patch)).(map[string]any))
		}
	}
	for _, o := range objs {
		if k.Namespace != "" && !clusterScoped[o.Kind()] {
			m := o.meta()
			if m == nil {
				m = map[string]any{}
				o["metadata"] = m
			}
			m["namespace"] = k.Namespace
		}
		for _, img := range k.Images {
			setImage(o, img.Name, img.NewName, img.NewTag)
		}
	}
	return objs, nil
}

// clusterScoped are the kinds deploy/k8s holds that have no namespace.
var clusterScoped = map[string]bool{"Namespace": true}

// readObjects reads every object of a multi-document YAML file.
func readObjects(file string) ([]Object, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("deploytest: %w", err)
	}
	var objs []Object
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	for {
		// A map[string]any, not an Object: yaml gives nested maps the
		// type of the outer one.
		var o map[string]any
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("deploytest: %s: %w", file, err)
		}
		if o != nil {
			objs = append(objs, Object(o))
		}
	}
}

// mergePatch merges a strategic-merge patch into dst (changing dst) and
// returns the result.
func mergePatch(dst, patch any) any {
	switch p := patch.(type) {
	case map[string]any:
		d, ok := dst.(map[string]any)
		if !ok {
			return p
		}
		for k, v := range p {
			if v == nil {
				delete(d, k)
				continue
			}
			d[k] = mergePatch(d[k], v)
		}
		return d
	case []any:
		d, ok := dst.([]any)
		if !ok || !allNamed(p) || !allNamed(d) {
			return p
		}
		for _, item := range p {
			name := item.(map[string]any)["name"]
			i := slices.IndexFunc(d, func(x any) bool { return x.(map[string]any)["name"] == name })
			if i < 0 {
				d = append(d, item)
				continue
			}
			d[i] = mergePatch(d[i], item)
		}
		return d
	}
	return patch
}

// allNamed: every item is a map with a name (containers, env, volumes),
// so a patch merges into the list by name.
func allNamed(list []any) bool {
	for _, x := range list {
		m, ok := x.(map[string]any)
		if !ok || m["name"] == nil {
			return false
		}
	}
	return true
}

// setImage sets the repository and tag of every container image named
// name in o's pod template (newName or newTag empty: kept).
func setImage(o Object, name, newName, newTag string) {
	spec, _ := o["spec"].(map[string]any)
	tmpl, _ := spec["template"].(map[string]any)
	pod, _ := tmpl["spec"].(map[string]any)
	for _, key := range []string{"initContainers", "containers"} {
		list, _ := pod[key].([]any)
		for _, c := range list {
			c, _ := c.(map[string]any)
			img, _ := c["image"].(string)
			repo, tag, _ := strings.Cut(img, ":")
			if repo != name {
				continue
			}
			if newName != "" {
				repo = newName
			}
			if newTag != "" {
				tag = newTag
			}
			if tag != "" {
				repo += ":" + tag
			}
			c["image"] = repo
		}
	}
}
