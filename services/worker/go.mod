module github.com/aiforge/aiforge/services/worker

go 1.26.8
