package deploy

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Pinned validators, installed into the cache on first use.
const (
	// kubernetes-validate bundles the Kubernetes JSON schemas (strict
	// variants reject unknown fields) from 1.25 to 1.37.
	kubernetesValidatePkg = "kubernetes-validate==1.37.0"
	// @kubernetes-models/keda bundles validators generated from KEDA's API
	// types (github.com/kedacore/keda/v2/apis/keda/v1alpha1).
	kedaModelsPkg = "@kubernetes-models/keda@2.0.0"
)

// unavailable ends a test that lacks a tool: it fails in CI (CI set), so
// that CI never passes by skipping, and is skipped elsewhere.
func unavailable(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

func cacheRoot() string {
	if d := os.Getenv("BRAID_CACHE_DIR"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "braid-cache")
	}
	return filepath.Join(home, ".cache", "braid")
}

// installOnce installs into dir with install(tmp) unless dir exists: into a
// temporary sibling first, renamed when complete, so that an interrupted
// install is never taken for a complete one.
func installOnce(dir string, install func(tmp string) error) error {
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), filepath.Base(dir)+".tmp.")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := install(tmp); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, ".complete"), nil, 0o644); err != nil {
		return err
	}
	os.RemoveAll(dir) // an incomplete one
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(filepath.Join(dir, ".complete")); serr == nil {
			return nil // another process won the race
		}
		return err
	}
	return nil
}

func run(ctx context.Context, dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

var (
	kvOnce sync.Once
	kvDir  string
	kvErr  error
)

// kubernetesValidate returns a command line that runs kubernetes-validate,
// and the environment it needs, installing it with pip on first use.
func kubernetesValidate(t *testing.T) (argv []string, env []string) {
	t.Helper()
	python, err := exec.LookPath("python3")
	if err != nil {
		unavailable(t, "python3 is not on PATH: needed to run %s (Debian: apt-get install -y python3 python3-pip)", kubernetesValidatePkg)
	}
	kvOnce.Do(func() {
		// The package has compiled dependencies: one install per Python.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		ver, err := run(ctx, "", nil, python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])")
		if err != nil {
			kvErr = fmt.Errorf("python3 does not run: %v: %s", err, ver)
			return
		}
		kvDir = filepath.Join(cacheRoot(), "deploy-tools", "py"+strings.TrimSpace(ver)+"-"+strings.ReplaceAll(kubernetesValidatePkg, "==", "-"))
		kvErr = installOnce(kvDir, func(tmp string) error {
			out, err := run(ctx, "", nil, python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
				"--no-input", "--target", tmp, kubernetesValidatePkg)
			if err != nil {
				return fmt.Errorf("pip install --target %s %s: %v\n%s", tmp, kubernetesValidatePkg, err, out)
			}
			return nil
		})
	})
	if kvErr != nil {
		unavailable(t, "cannot install the Kubernetes schema validator: %v", kvErr)
	}
	return []string{python, "-m", "kubernetes_validate"}, []string{"PYTHONPATH=" + kvDir, "PYTHONDONTWRITEBYTECODE=1"}
}

var (
	kedaOnce sync.Once
	kedaDir  string
	kedaErr  error
)

// kedaValidatorScript validates the KEDA objects in the JSON array file
// argv[2] with @kubernetes-models/keda; it prints one line per object and
// exits 1 if any is invalid.
const kedaValidatorScript = `import { readFileSync } from "node:fs";
import { ScaledObject } from "@kubernetes-models/keda/keda.sh/v1alpha1/ScaledObject";
import { TriggerAuthentication } from "@kubernetes-models/keda/keda.sh/v1alpha1/TriggerAuthentication";
const models = { ScaledObject, TriggerAuthentication };
let failed = false;
for (const doc of JSON.parse(readFileSync(process.argv[2], "utf8"))) {
  const name = doc.kind + "/" + (doc.metadata && doc.metadata.name);
  const Model = models[doc.kind];
  if (!Model || doc.apiVersion !== "keda.sh/v1alpha1") {
    console.log("error " + name + ": no validator for " + doc.apiVersion + " " + doc.kind);
    failed = true;
    continue;
  }
  try {
    new Model(doc).validate();
    console.log("valid " + name);
  } catch (e) {
    console.log("error " + name + ": " + e.message);
    failed = true;
  }
}
process.exit(failed ? 1 : 0);
`

// kedaValidate returns the node command line that validates KEDA objects,
// installing @kubernetes-models/keda with npm on first use.
func kedaValidate(t *testing.T) []string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		unavailable(t, "node is not on PATH: needed to run the validators of %s (Debian: apt-get install -y nodejs npm)", kedaModelsPkg)
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		unavailable(t, "npm is not on PATH: needed to install %s (Debian: apt-get install -y npm)", kedaModelsPkg)
	}
	kedaOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		kedaDir = filepath.Join(cacheRoot(), "deploy-tools", "npm-"+strings.NewReplacer("@", "", "/", "-").Replace(kedaModelsPkg))
		kedaErr = installOnce(kedaDir, func(tmp string) error {
			if err := os.WriteFile(filepath.Join(tmp, "package.json"), []byte(`{"name":"braid-deploy-validators","private":true,"type":"module"}`), 0o644); err != nil {
				return err
			}
			out, err := run(ctx, tmp, nil, npm, "install", "--no-audit", "--no-fund", "--no-update-notifier", "--loglevel=error", kedaModelsPkg)
			if err != nil {
				return fmt.Errorf("npm install %s: %v\n%s", kedaModelsPkg, err, out)
			}
			return nil
		})
		if kedaErr == nil {
			kedaErr = os.WriteFile(filepath.Join(kedaDir, "validate-keda.mjs"), []byte(kedaValidatorScript), 0o644)
		}
	})
	if kedaErr != nil {
		unavailable(t, "cannot install the KEDA validator: %v", kedaErr)
	}
	return []string{node, filepath.Join(kedaDir, "validate-keda.mjs")}
}
