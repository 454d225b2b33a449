package batch

// defaultScheduler is the fair-share scheduler (services/batch/fairshare).
func defaultScheduler(Config) Scheduler { return nil }
