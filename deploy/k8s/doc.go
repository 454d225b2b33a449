// Package k8s holds no code: its test builds the kustomize base and
// overlays in this directory and decodes every manifest strictly.
package k8s
