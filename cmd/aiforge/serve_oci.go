package main

import (
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/aiforge/aiforge/services/guardian"
)

// ociFlags configure the guardian's pulls of OCI artifacts.
type ociFlags struct {
	authFile string
	insecure []string
}

// defaultDockerConfig is $DOCKER_CONFIG/config.json, else
// ~/.docker/config.json.
func defaultDockerConfig() string {
	if d := os.Getenv("DOCKER_CONFIG"); d != "" {
		return filepath.Join(d, "config.json")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".docker", "config.json")
	}
	return ""
}

func (f *ociFlags) add(c *cobra.Command) {
	c.Flags().StringVar(&f.authFile, "oci-auth-file", env("AIFORGE_OCI_AUTH_FILE", defaultDockerConfig()), "guardian: Docker config file with OCI registry credentials (AIFORGE_OCI_USERNAME / AIFORGE_OCI_PASSWORD take precedence)")
	c.Flags().StringSliceVar(&f.insecure, "oci-insecure-registries", nil, "guardian: OCI registries (host:port) spoken to over plain HTTP; every other is HTTPS")
}

// apply sets the guardian's OCI configuration; the password comes from the
// environment only, never a flag (flags show in process listings).
func (f *ociFlags) apply(g *guardian.Config) {
	g.OCI.AuthFile = f.authFile
	g.OCI.InsecureRegistries = f.insecure
	g.OCI.Username = os.Getenv("AIFORGE_OCI_USERNAME")
	g.OCI.Password = os.Getenv("AIFORGE_OCI_PASSWORD")
}
