module github.com/aiforge/aiforge/services/edge

go 1.26.8
