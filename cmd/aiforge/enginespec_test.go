package main

import (
	"strings"
	"testing"
)

func TestParseEngineSpec(t *testing.T) {
	env := map[string]string{"KEY_B": "sk-b"}
	e, err := parseEngineSpec("id=b,base-url=http://gpu-b:8000/v1,upstream=qwen,weight=2,api-key-env=KEY_B,kind=provider,rpm=60,tpm=1000,max-concurrency=4",
		func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"id": "b", "base_url": "http://gpu-b:8000/v1", "model": "qwen", "weight": 2, "api_key": "sk-b",
		"kind": "provider", "rpm": 60, "tpm": 1000, "max_concurrency": 4}
	for k, v := range want {
		if e[k] != v {
			t.Errorf("%s = %v, want %v", k, e[k], v)
		}
	}
	for spec, why := range map[string]string{
		"base-url=http://x/v1,upstream=u":                       "required",
		"id=b,base-url=http://x/v1,upstream=u,x=1":              "unknown key",
		"id=b,base-url=http://x/v1,upstream=u,rpm=a":            "whole number",
		"id=b,base-url=http://x/v1,upstream=u,api-key-env=NONE": "empty",
		"id=b,junk": "key=value",
	} {
		if _, err := parseEngineSpec(spec, func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("%q: %v, want an error saying %q", spec, err, why)
		}
	}
}

func TestRegisterRepeatedFlagsKeepCommas(t *testing.T) {
	reg, _, err := modelsCmd().Find([]string{"register"})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.ParseFlags([]string{"--engine", "id=b,base-url=http://b/v1,upstream=u", "--engine", "id=c,base-url=http://c/v1,upstream=u",
		"--fallback", "x", "--fallback", "y"}); err != nil {
		t.Fatal(err)
	}
	if got := reg.Flag("engine").Value.String(); got != "id=b,base-url=http://b/v1,upstream=u id=c,base-url=http://c/v1,upstream=u" {
		t.Fatalf("--engine = %q", got)
	}
	if got := reg.Flag("fallback").Value.String(); got != "x y" {
		t.Fatalf("--fallback = %q", got)
	}
}
