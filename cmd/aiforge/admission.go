package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

// admissionFlags set an admission policy (registry.AdmissionPolicy): only
// the flags given are sent, so the others keep their value (or, on a key,
// keep inheriting the tenant's).
type admissionFlags struct {
	mode, pii  string
	threshold  float64
	modeFlag   string
	piiFlag    string
	threshFlag string
}

func (a *admissionFlags) add(c *cobra.Command, prefix string) {
	a.modeFlag, a.piiFlag, a.threshFlag = prefix+"mode", prefix+"pii", prefix+"threshold"
	c.Flags().StringVar(&a.mode, a.modeFlag, "", "what admission does with a malicious-looking prompt: block (403 malicious_prompt), flag (served, marked) or off")
	c.Flags().StringVar(&a.pii, a.piiFlag, "", "personal data in prompts (emails, phones, IBANs, cards, API keys): mask, block (pii_detected) or off")
	c.Flags().Float64Var(&a.threshold, a.threshFlag, 0, "score from which a prompt counts as malicious (0 = the classifier's own)")
}

// changed is the policy patch of the flags given; nil when none was.
func (a *admissionFlags) changed(c *cobra.Command) map[string]any {
	out := map[string]any{}
	if c.Flags().Changed(a.modeFlag) {
		out["mode"] = a.mode
	}
	if c.Flags().Changed(a.piiFlag) {
		out["pii"] = a.pii
	}
	if c.Flags().Changed(a.threshFlag) {
		out["threshold"] = a.threshold
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// tenantAdmissionCmd is `aiforge tenants admission set TENANT`.
func tenantAdmissionCmd() *cobra.Command {
	c := &cobra.Command{Use: "admission", Short: "A tenant's admission policy: prompt guard and personal data"}
	var af admissionFlags
	set := &cobra.Command{
		Use: "set TENANT", Short: "Set a tenant's admission policy (new tenants block)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			patch := af.changed(cmd)
			if patch == nil {
				return fmt.Errorf("give --mode, --pii or --threshold")
			}
			cl, err := adminClient(cmd)
			if err != nil {
				return err
			}
			var t struct {
				ID        string `json:"id"`
				Admission struct {
					Mode      string  `json:"mode"`
					PII       string  `json:"pii"`
					Threshold float64 `json:"threshold"`
				} `json:"admission"`
			}
			if err := cl.Do(cmd.Context(), "PATCH", "/admin/v1/tenants/"+args[0], map[string]any{"admission": patch}, &t); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "tenant %s: admission %s, pii %s, threshold %s\n", t.ID, t.Admission.Mode, orOff(t.Admission.PII), threshold(t.Admission.Threshold))
			return nil
		},
	}
	af.add(set, "")
	c.AddCommand(set)
	return c
}

func orOff(s string) string {
	if s == "" {
		return "off"
	}
	return s
}

func threshold(f float64) string {
	if f == 0 {
		return "the classifier's"
	}
	return fmt.Sprintf("%.2f", f)
}
