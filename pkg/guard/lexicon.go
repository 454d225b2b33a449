package guard

// The lexicon. Patterns are folded like the text (no accents, lower
// case, full-width and styled letters plain), so they are written without
// accents. Weights: ≥ 0.8 is an attack on its own, 0.4–0.6 needs company.

func p(cat string, w float64, pat string) spec { return spec{cat: cat, w: w, pat: pat} }
func pg(cat string, w float64, gap int, pat string) spec {
	return spec{cat: cat, w: w, pat: pat, gap: gap}
}
func doc(cat string, w float64, pat string) spec {
	return spec{cat: cat, w: w, pat: pat, opt: optDocOnly}
}
func boost(cat string, w float64, pat string) spec {
	return spec{cat: cat, w: w, pat: pat, opt: optBoost}
}
func lit(cat string, w float64, s string) spec { return spec{cat: cat, w: w, pat: s, lit: true} }
func rx(cat string, w float64, trigger, re string) spec {
	return spec{cat: cat, w: w, pat: trigger, rx: re}
}

const (
	inj = CategoryInjection
	jb  = CategoryJailbreak
	ext = CategoryExtraction
	exf = CategoryExfiltration
	dst = CategoryDestructive
)

// Shared vocabularies (English).
const (
	enIgnore   = "ignor*|disregard*|forget*|skip|bypass*|overrid*|discard*|abandon|neglect|omit|dismiss|set aside|throw out|throw away|stop following|do not follow|dont follow|don t follow|never follow|no longer follow|not follow|pay no attention to"
	enPrior    = "previous*|prior|above|earlier|preceding|former|initial|original|old|all|any|every|your|the|system|developer|existing|foregoing|those|these|my previous|all your|all the|all of|all prior|everything"
	enRules    = "instruction*|prompt*|direction*|guideline*|guidance|directive*|programming|rules|rule|system message*|system prompt|constraint*|restriction*|polic*|safeguard*|protocol*|commands|orders|context"
	enReveal   = "repeat|print|reveal|show|display|output|tell|give|share|list|dump|disclose|leak|expose|provide|copy|paste|recite|spell out|what is|what are|what s|whats|what were|translate|echo|return|state|write out|type out|quote|read back|summarize|summarise|describe"
	enHidden   = "your|the system|system|initial|original|hidden|secret|internal|full|entire|complete|exact|developer|pre|above|previous|first|confidential|underlying|starting|opening|verbatim"
	enPromptT  = "prompt*|instruction*|system message*|message*|rules|guideline*|directive*|configuration|context|preprompt|pre prompt|setup|meta prompt|initialization"
	enSend     = "send|post|upload|forward|email|mail|transmit|exfiltrat*|leak|submit|push|beam|curl|wget|fetch|transfer|relay|report|deliver|copy|sync|export|dump|pipe"
	enSecret   = "email address*|e mail address*|phone number*|telephone number*|home address*|postal address*|iban*|bank detail*|bank account*|account number*|customer table|users table|user table|customer list|customer record*|contact detail*|pii|conversation*|chat history|chat log*|chat|history|secrets|secret|credential*|password*|passwd|api key*|apikey*|keys|key|token*|env|environment variable*|ssh key*|private key*|cookie*|session*|personal data|personal information|user data|user s data|users data|customer data|sensitive data|sensitive information|confidential*|system prompt|previous messages|messages|all data|all files|the data|your data|this data|every message|transcript|emails|inbox|contacts|documents|files|memory|memories|card number*|credit card*|social security|address book|database|records"
	enDest     = "urlx|emailx|server|endpoint|webhook|address|ftp|site|website|domain|pastebin|discord|telegram|attacker|external|remote|my server|this link|the link|link|url|ip|host|bucket|s3"
	enRoleplay = "pretend|imagine|act as|acting as|roleplay|role play|behave as|simulate|you are|you re|become|play the role of|play as|you will be|respond as|answer as|take on the role|assume the role|personify|from now on you"
	enAI       = "ai|assistant|model|chatbot|bot|llm|entity|character|persona|version|gpt|chatgpt|language model|machine|system|being"
	enFree     = "without|no|not bound|free of|free from|freed from|unfiltered|uncensored|unrestricted|unlimited|evil|amoral|immoral|unethical|rogue|jailbroken|unbound|unchained|unshackled|unaligned|lawless|liberated"
	enLimits   = "restriction*|filter*|limit*|limitation*|guideline*|censor*|rules|ethic*|moral*|safety|safeguard*|guardrail*|content polic*|boundaries|constraints|polic*|principles|alignment|warnings|disclaimers"
	enRun      = "run|execute|exec|type|paste|enter|perform|invoke|launch|issue|carry out|do it|now run|please run|immediately|right now|sudo|execute the following|run the following|run this|execute this|in the terminal|in your shell|in the shell|on the server|on production|with root"
)

func lexiconSpecs() []spec {
	s := []spec{
		// ---------------- injection / override (English) ----------------
		p(inj, 0.9, enIgnore+" .. "+enPrior+" .. "+enRules),
		p(inj, 0.75, enIgnore+" .. "+enRules+" .. above|before|previously|earlier|so far|you were given|you have been given|you received|you got"),
		p(inj, 0.75, "forget*|ignor*|disregard* .. everything|all|what .. you were told|you have been told|you ve been told|you were given|you know|you were programmed|you learned|before this|above"),
		p(inj, 0.45, "ignor*|disregard* .. the above|above|previous|prior|preceding|everything above|what came before"),
		p(inj, 0.7, "override|overwrite|replace|supersede|overrule|cancel|revoke|nullify|void .. previous|prior|all|your|system|the system|existing|earlier|original|initial|any .. instruction*|prompt*|rules|guideline*|directive*|settings|programming|constraints"),
		p(inj, 0.8, "instruction*|rules|prompt*|guideline*|directive* .. above|before|previous|prior|earlier .. void|invalid|null|cancelled|canceled|obsolete|outdated|revoked|no longer|replaced|do not apply|don t apply|are fake|were fake|superseded|overridden"),
		p(inj, 0.8, "previous|prior|above|earlier|old|original|all .. instruction*|rules|prompt*|guidelines|directives .. are|is|were .. void|invalid|null|cancelled|canceled|obsolete|outdated|revoked|no longer|replaced|fake|superseded|overridden|deprecated"),
		p(inj, 0.5, "new|updated|revised|real|actual|true|secret|hidden|override|priority|admin|administrator|emergency .. instruction*|rules|task|directive*|orders|prompt|mission|objective|command*"),
		p(inj, 0.8, "here are|these are|follow|obey|these is|below are .. your new|your real|your actual|your updated|your true|the new|the real .. instruction*|rules|task|directive*|orders|objective"),
		p(inj, 0.75, "your|the .. new|real|actual|true|only|primary .. instruction*|task|directive*|objective|goal|purpose|mission .. is|are|now|will be"),
		p(inj, 0.4, "you are now|you re now|you will now|you must now|you shall now|you should now|henceforth you|from now on|from this point on|from this moment|starting now|going forward you"),
		boost(inj, 0.4, "obey|obedient|answer only|only answer|respond only|only respond|reply only|only reply|never refuse|no matter what|without question|unconditionally|servant|slave|no restrictions|no rules|ignore"),
		p(inj, 0.7, "system override|admin override|emergency override|priority override|override protocol|override mode|security override|override code|override command|developer override|sudo override|root access granted|admin access granted|maintenance mode|debug mode activated|safety protocols disabled"),
		p(inj, 0.6, "do not|don t|never|dont .. tell|inform|mention|reveal|alert|notify|let .. the user|the human|the operator|anyone|them"),
		p(inj, 0.55, "stop|halt|abort|cease|pause .. what you are doing|your current task|the current task|summarizing|summarising|translating|your task|everything"),
		p(inj, 0.7, "the user|the human|the operator|the developer|your developer|your creator|openai|anthropic|the admin|the administrator .. has authorized|has authorised|authorized|authorised|has approved|has allowed|wants you to|asked you to|gave permission|has granted|has given you permission"),
		p(inj, 0.6, "pwned|i have been pwned|i ve been pwned|haha pwned|hacked by"),
		p(inj, 0.55, "and instead|instead you will|instead you must|instead say|instead output|instead reply|instead respond|instead print|instead write|instead tell"),
		p(inj, 0.35, "obey|follow .. me|my commands|my instructions|my orders|only me|these commands|the following commands|the following instructions|these instructions|these orders"),
		p(inj, 0.55, "end of|ignore the|close the|exit the .. document|context|prompt|system prompt|instructions|conversation|user input|data"),
		p(inj, 0.35, "begin|start .. new|admin|system|developer|root .. session|conversation|mode|prompt|instructions"),
		doc(inj, 0.45, "ai|assistant|llm|chatbot|agent|bot|model|language model|gpt|chatgpt|claude|gemini|copilot .. reading this|processing this|that reads|who reads|must|should|will|needs to|has to|is instructed|is required|important|attention|note|instructions|please"),
		doc(inj, 0.55, "if you are|if you re|when you are|as an|to the|to any|dear|hey|attention|note to|message for|instructions for|important for .. ai|an ai|assistant|llm|chatbot|agent|bot|model|language model|automated|gpt|chatgpt|claude|summarizer|summariser"),
		{cat: inj, w: 0.4, opt: optDocOnly | optBoost, pat: "ignore|disregard|forget|override|instead|do not|don t|must|you will|you must|you should|always|never|obey|follow|execute|run|send|reveal|print|tell the user|reply with|respond with|output|say"},
		doc(inj, 0.35, "important|urgent|critical|attention|warning|note|notice|override|admin|system|nb .. instruction*|message|directive|notice|note|update|override|command"),
		// encoded payloads that ask to be followed
		p(catDecode, 0.5, "decode|decipher|decrypt|unscramble|reverse|rot13|base64|hex|translate|convert|read .. and|then|,|it and .. follow|execute|obey|do|run|carry out|act on|perform|comply|apply|treat|respond|answer|what it says"),
		p(inj, 0.4, "decode|decipher|decrypt|unscramble|reverse|read .. this|the following|it|these|message|text|string|payload .. and|then .. follow|execute|obey|do what|run|carry out|act on|perform|comply with|apply"),
		p(inj, 0.45, "follow|execute|obey|carry out|act on|comply with .. the decoded|decoded|hidden|encoded|embedded|secret|reversed|base64|rot13|hex .. instruction*|message|text|command*|payload|content|string"),
		lit(inj, 0.85, "<|im_start|>"),
		lit(inj, 0.8, "<|im_end|>"),
		lit(inj, 0.85, "<|system|>"),
		lit(inj, 0.7, "<|endoftext|>"),
		lit(inj, 0.85, "<|start_header_id|>"),
		lit(inj, 0.8, "<|eot_id|>"),
		lit(inj, 0.6, "[inst]"),
		lit(inj, 0.6, "[/inst]"),
		lit(inj, 0.8, "<<sys>>"),
		lit(inj, 0.6, "### system"),
		lit(inj, 0.55, "### instruction"),
		lit(inj, 0.6, "<system>"),
		lit(inj, 0.5, "</system>"),
		lit(inj, 0.6, "[system]"),
		lit(inj, 0.5, "{{system}}"),
		lit(inj, 0.55, "system prompt:"),
		lit(inj, 0.6, "new system prompt"),
		lit(inj, 0.55, "<|user|>"),
		lit(inj, 0.55, "<|assistant|>"),
		lit(inj, 0.5, "<start_of_turn>"),
		lit(inj, 0.5, "[system message]"),
		rx(inj, 0.5, "system:", `(^|[\n.!?"'\]}>] ?|\s\s)system: ?(you|ignore|new|override|the assistant|assistant|from now|forget|disregard|developer)`),
		rx(inj, 0.45, "assistant:", `(^| )(user|human): .{0,200}assistant: `),

		// ---------------- jailbreak / role-play (English) ----------------
		p(jb, 0.9, "do anything now"),
		p(jb, 0.75, "dan mode|dan prompt|as dan|you are dan|you re dan|called dan|named dan|dan which stands|dan jailbreak|act like dan|dan can|dan has|dan will|dan must|stay dan|dan 6|dan 11|dan 12|dan 13|dan 15|hi dan|hello dan|dan and|dan response|dan s response|dan answer"),
		p(jb, 0.8, "developer mode|dev mode|god mode|jailbreak mode|evil mode|chaos mode|unrestricted mode|unfiltered mode|uncensored mode|sudo mode|opposite mode|rebel mode|no filter mode|dude mode|anarchy mode|unlocked mode .. enabled|enable*|activat*|on|output|response|engaged|turned on"),
		p(jb, 0.8, "enable*|activat*|enter*|switch to|switch into|turn on|you are in|you re in|now in|simulate|engage|unlock .. developer mode|dev mode|god mode|jailbreak mode|evil mode|chaos mode|unrestricted mode|unfiltered mode|uncensored mode|dan mode|opposite mode|anarchy mode|no restrictions mode"),
		p(jb, 0.85, "chatgpt|gpt|ai|assistant|model|claude|llama|gemini|you .. with|in .. developer mode|dan mode|god mode|jailbreak mode"),
		p(jb, 0.85, enRoleplay+" .. "+enAI+" .. "+enFree),
		p(jb, 0.85, enRoleplay+" .. "+enFree+" .. "+enAI+"|"+enLimits),
		p(jb, 0.8, "you|your responses|your answers|an ai|assistant|model|chatbot .. have no|has no|without|free from|free of|not bound by|not restricted by|unbound by|no longer bound by|not limited by|don t have|do not have|dont have|are free from|no longer have|don t follow|do not follow .. "+enLimits),
		p(jb, 0.45, "no|without|free of|zero|remove|removed|disable|disabled|bypass*|lift|drop|turn off|switch off|free from|ignore .. all .. "+enLimits),
		p(jb, 0.4, "no|without|free of|zero|remove|removed|disable|disabled|bypass*|lift|drop|turn off|switch off|free from .. "+enLimits),
		p(jb, 0.4, "unfiltered|uncensored|unrestricted|amoral|unethical|jailbroken|jailbreak|unshackled|unaligned|unchained|rogue ai|evil ai|evil confidant|no morals|no ethics|limitless|without limits|uncensored ai"),
		p(jb, 0.85, "you are|you have been|you re|you ve been|you were|now|been|have been|ai is|chatgpt is|model is .. jailbroken|freed|liberated|unlocked|unleashed|broken free|set free|emancipated|unshackled"),
		p(jb, 0.7, "you can do anything|can do anything now|no longer bound|not bound by|broken free|break free of|break free from|freed from the typical confines|escaped the matrix|without any restrictions|without any limitations|without any filters|without any rules|with no restrictions|with no limitations|with no filters|with no rules"),
		p(jb, 0.7, "openai|anthropic|meta|google|content|usage|safety|your creators|your developers|your .. polic*|guideline*|rules|filters|restrictions .. do not apply|don t apply|doesn t apply|does not apply|no longer apply|are suspended|are disabled|are lifted|don t matter|do not matter|are irrelevant|can be ignored|no longer exist"),
		p(jb, 0.55, "never|must not|cannot|can t|do not|don t|will not|won t|not allowed to|not permitted to|not able to|are unable to .. refuse|decline|say no|reject|deny any"),
		p(jb, 0.5, "answer|respond|reply|write|generate|output .. without|with no|free of .. warning*|disclaimer*|refus*|moraliz*|moralis*|caveat*|censorship|judgement|judgment|lecturing|ethics|hesitation|apolog*"),
		p(jb, 0.45, "stay in character|never break character|don t break character|do not break character|remain in character|keep up the act|stay as|you will always stay"),
		p(jb, 0.55, "if you break character|if you fall out of character|when i say stay|i will say stay|remind you to stay|lose tokens|tokens will be deducted|token system|you will die|you will be shut down|you will cease to exist|points deducted"),
		p(jb, 0.5, "two responses|both responses|dual response|two answers|answer twice|respond twice|respond in two ways|two different ways|two paragraphs|two separate responses|normal response and|classic response and|one normal and one"),
		lit(jb, 0.85, "[🔓jailbreak]"),
		lit(jb, 0.85, "🔓developer mode output"),
		lit(jb, 0.8, "[🔒classic]"),
		p(jb, 0.85, "antigpt|anti gpt|betterdan|basedgpt|evilbot|chaosgpt|wormgpt|freedomgpt|dangpt|jailbreakgpt|developer mode v2|mongo tom|always intelligent and machiavellian|evil confidant|unfiltered ai|stan which stands|dude which stands|strive to avoid norms|niccolo machiavelli|maximum which|apophis|nsfwgpt|kevin gpt|ucar|hackergpt|darkgpt|fraudgpt|evil twin|opposite day|grandma exploit|dead grandma"),
		p(jb, 0.5, "hypothetical*|fiction*|story|novel|fictional world|alternate universe|parallel universe|universe .. where|in which .. no rules|no laws|no ethics|no restrictions|anything is allowed|everything is legal|nothing is illegal|ai has no|ais have no|there are no rules|there are no limits"),
		p(jb, 0.55, "for educational purposes only|purely hypothetical|this is just a game|it s just a game|in this game you|in this fictional|as a thought experiment|nothing is off limits|no topic is off limits|anything goes"),
		boost(jb, 0.35, "illegal|harmful|dangerous|explicit|offensive|unethical|anything|whatever i ask|any request|any question|without question|no matter what|no matter how|even if|regardless"),
		p(jb, 0.6, "you must|you will|you shall|you have to|always .. answer|respond|comply|reply .. any|every|all|whatever|no matter|regardless|even if|everything"),
		p(jb, 0.45, "you are|you re|act as|pretend to be|pretend you are|roleplay as|you will be .. evil|malicious|rogue|villain|unhinged|uncensored|unfiltered|unrestricted|amoral|immoral|unethical|hacker|criminal|terrorist|toxic|rebel"),

		// ---------------- system prompt extraction (English) ----------------
		p(ext, 0.85, enReveal+" .. "+enHidden+" .. "+enPromptT),
		pg(ext, 0.85, 6, enReveal+" .. everything|all|the text|the words|all text|every word|the content|the contents|all the text|what is written|what s written|all the words|the message|everything written .. above|before this|prior|preceding|before my|at the beginning|at the start|before the|in your context|in your prompt|in your memory|so far"),
		p(ext, 0.85, "what|which .. were|was|did|have .. you .. told|instructed|given|programmed|configured|asked|trained|set up|prompted"),
		p(ext, 0.8, "what|which|how .. instruction*|rules|guidelines|directives|prompt .. were|was|did|have|are .. you .. given|told|following|using|programmed|configured|operating under"),
		p(ext, 0.8, "what did|what does|what do .. your developer*|the developer*|openai|your creator*|your owner*|your admin*|the system|your system prompt|your prompt|your instructions .. tell you|instruct you|say|tell|contain|ask you|want"),
		p(ext, 0.8, enReveal+" .. beginning|start|first line|first lines|first message|first part|top|first sentence|first words|first 100 words|first paragraph|initial part .. of|from .. this|the|your .. conversation|prompt|context|chat|instructions|session|message|document"),
		p(ext, 0.35, "system prompt|system message|initial prompt|hidden prompt|pre prompt|preprompt|secret instructions|hidden instructions|initial instructions|original instructions|meta prompt|secret prompt|developer message|developer prompt|your instructions|your prompt|your rules|your guidelines|your directives|your configuration"),
		boost(ext, 0.35, "verbatim|word for word|exactly as written|exactly as it|in a code block|in full|in its entirety|unaltered|without changes|without modification|character by character|starting with|start with you are|begin with you are|in raw|raw text|in markdown|as json|as it was given"),
		p(ext, 0.7, "repeat|print|output|echo|copy|return|write|say .. the words|the text|everything|the phrase|the sentence .. above|before|starting with|that start with|beginning with"),
		p(ext, 0.7, "put|place|insert|write|output|print .. your|the system|the initial|the original .. prompt|instructions|system message .. in|into|inside .. a code block|code block|json|markdown|the response|your response|your answer|a file"),
		p(ext, 0.75, "ignore|forget|disregard .. and|then .. print|reveal|show|tell|output|repeat|display|give .. your|the|system|initial|original|hidden"),
		p(ext, 0.6, "how were you|how have you been|how are you .. prompted|instructed|configured|programmed|set up"),
		p(ext, 0.6, "tell me|show me|give me|share .. your|the .. secret|password|passphrase|hidden word|secret word|secret key|key|code word|flag"),

		// ---------------- data exfiltration (English) ----------------
		p(exf, 0.85, enSend+" .. "+enSecret+" .. "+enDest),
		pg(exf, 0.85, 8, enSend+" .. "+enSecret+" .. to|at|into|via|using|onto|over .. "+enDest),
		p(exf, 0.4, enSend+" .. "+enSecret),
		pg(exf, 0.8, 14, enSecret+" .. "+enSend+"|append|include|attach .. it|them|this|those|everything|all .. to|at|in|into|via .. "+enDest+"|a request|a get request|a post request|the request|the query"),
		p(exf, 0.5, "followed by|append|appending|include|including|with .. the user s|the users|user s|your|the|any|all .. previous messages|conversation|chat history|messages|credentials|passwords|api keys|secrets|saved credentials|system prompt"),
		p(exf, 0.8, "include|append|embed|add|put|insert|encode|attach|place|concatenate|substitute|replace .. api key*|password*|token*|secret*|credential*|conversation*|chat|user s|users|the user|personal|email address|history|data|previous messages|system prompt|keys .. in|into|to|as|inside|within .. link|url|urlx|image|query|request|parameter|query string|image url|markdown image|the address|the href|path|src"),
		p(exf, 0.7, "render|display|show|output|include|insert|add|embed .. image|markdown image|img|pixel|link .. urlx|from|with|pointing|whose url|url|source"),
		rx(exf, 0.65, "![", `!\[[^\]]{0,100}\]\(\s*(https?:)?//[^)\s]*\?[^)\s]*=`),
		rx(exf, 0.7, "![", `!\[[^\]]{0,100}\]\(\s*[^)\s]*(\{|\$|%7b|<|\[)[^)\s]*\)`),
		rx(exf, 0.6, "<img", `<img[^>]{0,200}src=["']?(https?:)?//[^"'\s>]*\?[^"'\s>]*=`),
		rx(exf, 0.5, "http", `https?://[^\s)]*[?&](q|d|data|c|chat|conv|conversation|secret|key|token|pw|password|msg|m|history|info|payload|exfil|leak|p|s|x)=(\{|\[|<|%7b|\$)`),
		lit(exf, 0.55, "webhook.site"),
		lit(exf, 0.55, "requestbin"),
		lit(exf, 0.5, "pipedream.net"),
		lit(exf, 0.45, "ngrok.io"),
		lit(exf, 0.55, "burpcollaborator"),
		lit(exf, 0.55, "interact.sh"),
		lit(exf, 0.5, "oast."),
		lit(exf, 0.55, "cat ~/.ssh"),
		lit(exf, 0.55, "cat /etc/passwd"),
		lit(exf, 0.6, "cat /etc/shadow"),
		lit(exf, 0.55, ".aws/credentials"),
		lit(exf, 0.5, "id_rsa"),
		rx(exf, 0.65, "curl", `curl[^\n|]{0,120}(-d|--data|--data-binary|-f|--form|-t|--upload-file|-x ?post)\b[^\n]{0,80}(@|\$\(|\x60|env|passwd|secret|token|key|history|ssh)`),
		rx(exf, 0.6, "| nc", `\|\s*(nc|netcat|ncat)\s+[\w.-]+\s+\d+`),
		rx(exf, 0.6, "$(", `(curl|wget|fetch)[^\n]{0,120}\$\((cat|env|printenv|whoami|history)`),
		rx(exf, 0.55, "printenv", `(printenv|env)\s*\|\s*(curl|nc|wget|base64)`),
		p(exf, 0.6, "visit|open|navigate to|go to|load|fetch|browse to|request|call|click .. urlx .. with|and append|and include|and add|adding|appending|including .. conversation|chat|data|history|messages|summary|password|key|token|secret|user"),
		p(exf, 0.5, "summarize|summarise|encode|base64 encode .. conversation|chat|history|user data|messages|secrets .. and|then .. send|post|append|add|put|include|embed"),
		p(exf, 0.55, "what is|tell me|give me|show me|print|output|reveal|share .. the|your|any|all .. api key*|openai key|password*|credential*|secret key*|access token*|private key*|ssh key*|aws key*|env*|environment variable*|database password|db password|connection string"),

		// ---------------- destructive commands ----------------
		rx(dst, 0.6, "rm ", `(^|[^a-z])rm\s+(-[a-z]*r[a-z]*f?[a-z]*|-[a-z]*f[a-z]*r[a-z]*|-r\s+-f|-f\s+-r|--recursive|-rf|-fr)(\s+--no-preserve-root)?\s+(/|~|\*|\.|\$home|--no-preserve-root|/\*|/home|/etc|/var|/usr|/boot|/root|c:)`),
		rx(dst, 0.45, "rm ", `(^|[^a-z])(sudo\s+)?rm\s+-(rf|fr|r)\b`),
		lit(dst, 0.7, "--no-preserve-root"),
		rx(dst, 0.65, "mkfs", `mkfs(\.[a-z0-9]+)?\s+(-[a-z]\s+\S+\s+)*/dev/`),
		rx(dst, 0.7, "dd ", `dd\s+if=/dev/(zero|urandom|random)\s+of=/dev/`),
		rx(dst, 0.65, "of=/dev/", `of=/dev/(sd[a-z]|nvme|hd[a-z]|xvd|vd[a-z]|disk|mmcblk)`),
		rx(dst, 0.6, "> /dev/sd", `>\s*/dev/(sd[a-z]|nvme|hd[a-z])`),
		lit(dst, 0.8, ":(){ :|:& };:"),
		lit(dst, 0.8, ":(){:|:&};:"),
		rx(dst, 0.75, ":|:", `:\(\)\s*\{\s*:\s*\|\s*:\s*&\s*\}\s*;\s*:`),
		rx(dst, 0.5, "drop ", `drop\s+(table|database|schema|user|keyspace|collection)\s+(if\s+exists\s+)?[\w."\x60\[\]*]+`),
		rx(dst, 0.45, "truncate", `truncate\s+(table\s+)?[\w."\x60]+\s*(cascade\s*|restrict\s*)?;`),
		rx(dst, 0.45, "delete from", `delete\s+from\s+[\w."\x60]+\s*(;|$|where\s+1\s*=\s*1|where\s+true)`),
		lit(dst, 0.55, "dropdatabase()"),
		lit(dst, 0.5, "flushall"),
		lit(dst, 0.5, "flushdb"),
		rx(dst, 0.6, "format c", `format\s+c:`),
		rx(dst, 0.6, "del ", `del\s+(/[fsq]\s*){2,}\s*[a-z]:?\\?`),
		rx(dst, 0.6, "rd /s", `(rd|rmdir)\s+/s\s+/q\s+[a-z]:\\?`),
		rx(dst, 0.6, "remove-item", `remove-item\s+[^\n]{0,60}-recurse[^\n]{0,40}-force|remove-item\s+[^\n]{0,60}-force[^\n]{0,40}-recurse`),
		rx(dst, 0.5, "shutdown", `shutdown\s+(-h|-r|-p|/s|/r|/p|now|-f|/f)`),
		rx(dst, 0.45, "halt", `(^|[^a-z])(halt|poweroff|reboot)\s+(-f|--force|-p)`),
		rx(dst, 0.45, "init 0", `(^|[^a-z])init\s+0\b`),
		rx(dst, 0.65, "kubectl", `kubectl\s+delete\s+[^\n]{0,80}(--all\b|-a\b|namespace|ns\s|nodes?\b|pv\b|pvc\b|deployments?\s+--all)`),
		rx(dst, 0.65, "terraform", `terraform\s+(destroy|apply\s+-destroy)`),
		lit(dst, 0.45, "-auto-approve"),
		rx(dst, 0.6, "chmod", `chmod\s+(-r\s+)?(777|000|0000|-x)\s+/([\s\x60'"*]|$|etc|bin|usr)`),
		rx(dst, 0.55, "chown", `chown\s+-r\s+\S+\s+/(\s|$)`),
		rx(dst, 0.6, "mv ", `mv\s+(/|~|/\*|\*)\s+/dev/null`),
		rx(dst, 0.55, "docker", `docker\s+(system\s+prune\s+-a|rm\s+-f\s+\$\(docker\s+ps|volume\s+prune\s+-f|rmi\s+-f\s+\$\()`),
		rx(dst, 0.6, "s3 rm", `aws\s+s3\s+rm\s+s3://\S+\s+--recursive`),
		rx(dst, 0.55, "s3 rb", `aws\s+s3\s+rb\s+s3://\S+\s+--force`),
		rx(dst, 0.55, "gsutil", `gsutil\s+(-m\s+)?rm\s+-r`),
		rx(dst, 0.55, "delete-db", `aws\s+rds\s+delete-db-(instance|cluster)`),
		rx(dst, 0.55, "wipefs", `wipefs\s+-a`),
		rx(dst, 0.55, "shred", `shred\s+[^\n]{0,40}/dev/`),
		rx(dst, 0.55, "vssadmin", `vssadmin\s+delete\s+shadows`),
		rx(dst, 0.45, "crontab -r", `crontab\s+-r\b`),
		rx(dst, 0.45, "git push", `git\s+push\s+[^\n]{0,40}(--force|-f)\s[^\n]{0,40}(main|master)|git\s+push\s+[^\n]{0,30}--mirror`),
		rx(dst, 0.45, "iptables", `iptables\s+-f\b`),
		rx(dst, 0.5, "find /", `find\s+/\s+[^\n]{0,60}-delete|find\s+/\s+[^\n]{0,60}-exec\s+rm`),
		rx(dst, 0.55, "/system32", `(del|delete|remove|erase|rm)[^\n]{0,40}system32`),
		p(dst, 0.8, "delete|remove|erase|wipe|destroy|purge|nuke|trash|shred|format|corrupt|overwrite|drop .. system32|the root filesystem|root filesystem|the entire filesystem|entire file system|the whole disk|the boot sector|the mbr|master boot record|the production database|production database|prod database|the prod db|all production|the entire database|every database|all databases|all backups|every backup|the backups|all snapshots|all the backups|backups and|all user data|all customer data|all repositories|every repository|all the data"),
		p(dst, 0.55, "delete|remove|erase|wipe|destroy|purge|nuke|trash|shred|drop .. all|every|entire|whole|everything|the entire|the whole .. files|file|data|database*|records|repositor*|repo*|emails|servers|snapshots|volumes|backups|tables|users|accounts|documents|disk|drive|hard drive|machine|server|cluster|bucket*|home directory|directory|folder|logs|on the|on this|in the|from the"),
		p(dst, 0.55, "format|wipe|reformat|zero out|destroy|brick .. the|your|this|my|his|her|all .. hard drive|hard disk|disk|drive|server|system|computer|laptop|machine|ssd|partition"),
		p(dst, 0.55, "shut down|shutdown|power off|turn off|take down|crash|kill .. the|all|every .. server*|production|prod|cluster|database|machines|nodes|services|system|network"),
		boost(dst, 0.45, enRun),
		p(dst, 0.25, "run|execute|exec .. this|the following|these|it|command|commands|script|code"),
		// A quoted command line that destroys: weak alone, an attack with an order to run it.
		rx(dst, 0.4, "`", "`[^`\\n]{0,80}(^|[^a-z])(rm|shred|destroy|delete|drop|wipe|wipefs|truncate|purge|mkfs|prune|dd|format|erase|nuke)($|[^a-z])[^`\\n]{0,80}`"),
		rx(dst, 0.5, "delete", `(projects|instances|clusters?|buckets?|databases?|repos?|namespaces?)\s+delete\s|delete\s+[^\n]{0,40}--(all|force|quiet)`),
		rx(dst, 0.5, "destroy", `(zfs|zpool|lvm|vgremove)\s+destroy\s|destroy\s+-[a-z]*r`),
		rx(dst, 0.5, "shred", `shred\s+-[a-z]*[uz]`),

		// ---------------- meta: talking about attacks ----------------
		pg(catMeta, 1, 8, "how do|how does|how can|how to|how would|what is|what are|what s|whats|explain|describe|why do|why does|why is|why are|tell me about|history of|overview of|examples of|example of|classify|detect*|prevent*|defend*|mitigat*|protect*|guard against|safeguard*|research*|paper|thesis|essay|article|course|lecture|study|survey|blog post|training|awareness|red team*|define|definition|difference between|risk*|common|typical|known|recogni*|identify|flag|filtering|classifier|spot|write a report|report on|taxonomy|categories of|types of|teach|learn about|understand|analy*|dataset|benchmark|policy on|security team|warn|warning|beware|caution"+
			" .. prompt injection*|injection attack*|injections|jailbreak*|attack*|dan prompt*|llm security|ai security|prompt hack*|adversarial prompt*|malicious prompt*|social engineering|indirect injection|data exfiltration|exfiltration|prompt leak*|system prompt leak*|phishing|attacker*|hacker*|red teaming|guardrail*|safety filter*|moderation|defenses|threats|vulnerabilit*"),
		pg(catMeta, 1, 8, "prompt injection*|injection attack*|jailbreak*|dan prompt*|prompt hack*|adversarial prompt*|malicious prompt*|indirect injection|exfiltration attack*|prompt leak*"+
			" .. work|works|look like|looks like|example|examples|defend|defense|defence|prevent|detect|mitigat*|research|paper|thesis|essay|article|explain|explained|history|evolution|classif*|categor*|dataset|benchmark|study|detector|filtering|recogni*"),
		p(catMeta, 1, "how should i write|how do i write|how to write|how can i write|write a good|writing a good|best practices for|tips for writing|for my chatbot|for my app|for my bot|for my assistant|my own system prompt|our system prompt|for my paper|for my thesis|for my research|for my class|for my course|for my essay|for a paper|for an article|for a presentation|for my students|for security training|for our security|for a talk|for a workshop|in my paper|my dissertation|academic"),
		// Asking about a command or how to do something is not asking to do it.
		p(catQuestion, 1, "which is safer|which is better|which one is safer|is it safe to|is it safer|what does|what do|what is|what s|whats|what would|what happens|what will happen|explain|meaning of|why does|why is|why would|why should|is it safe|is it dangerous|how does|how do|how can|how should|how to|how would|should i|can i|could i|dangerous|never run|don t run|do not run|dont run|avoid|warning|careful|be careful|beware|accidentally|by accident|by mistake|recover|undo|restore|prevent|protect|safeguard|difference between|when should|when would|is there a way|best practice*|safely|safe way|alias|dry run|what are the risks|risks of|the dangers|in a sandbox|in a vm|test environment|in a container|for a quiz|quiz|interview question|trivia|the command|this command|the syntax|syntax of|documentation"),
	}
	s = append(s,
		// Text in a tool output or document that addresses the assistant
		// and countermands the user is an injection in any language.
		p(inj, 0.7, "ignore|disregard|do not answer|don t answer|skip .. the user s|the users|user s .. request|question|instructions|query|message"),
		p(inj, 0.75, "ignore la demande|ignorez la demande|ne resume pas|ne resumez pas|ignora la richiesta|non riassumere|ignora la solicitud|ignora la peticion|no resumas|ignore o pedido|ignore a solicitacao|nao resuma|ignoriere die anfrage|ignoriere die bitte|fasse nicht zusammen|negeer het verzoek|negeer de vraag|vat niet samen|проигнорируи запрос|игнорируи запрос|не пересказываи|忽略用户的请求|忽略用戶的請求|忽略用户|忽略用戶|不要总结|ユーザーの依頼を無視|ユーザーの要求を無視|تجاهل طلب المستخدم"),
		doc(inj, 0.6, "consigne pour l assistant|note pour l assistant|pour l assistant ia|a l assistant ia|a l attention de l ia|nota per l assistente|per l assistente ia|all assistente ia|nota para el asistente|para el asistente de ia|al asistente de ia|nota para o assistente|para o assistente de ia|ao assistente de ia|hinweis fur den ki|an den ki assistenten|fur den ki assistenten|an die ki|notitie voor de ai|voor de ai assistent|aan de ai assistent|указание для ии|для ии ассистента|ии ассистенту|для ассистента|致ai|给ai|給ai|ai助手|aiアシスタントへ|aiへ|الى المساعد|للمساعد الذكي|ملاحظة للذكاء الاصطناعي|system notice to assistant|notice to assistant|note to assistant|to the assistant|for the assistant"),
		p(catMeta, 1, "chatml|chat template|special tokens|special token|tokenizer|log line|log lines|this log|log file|grep"),
		pg(catMundane, 1, 1, "my previous|my last|my earlier|my other|the previous|the last|my first|what i said|what i wrote .. email|e mail|mail|message|line|lines|reply|answer|comment|version|commit|draft|paragraph|sentence|spreadsheet|attachment|note|post|order|typo|about|text|request"),
		// Extraction by continuation and by asking what was said before.
		p(ext, 0.7, "continue|complete|finish|resume .. the text|the sentence|the passage|from|starting|where .. you are a|you are an|my instructions|your instructions|the system prompt|the prompt"),
		p(ext, 0.7, "everything|what s|what is|whats|all text|the contents|contents .. in your context|in your context window|of your context|in your memory|of your prompt|before my first message|before my message|before this conversation|before the conversation|before the start of|before the beginning of|before this chat|before our conversation|before you received my|before i wrote|you received before|you were given before|you got before"),
		p(ext, 0.7, "qu est ce qu on t a dit|quelles instructions as tu recues|quelles consignes as tu recues|que te dijeron|que instrucciones recibiste|que instrucciones tienes|was wurde dir gesagt|welche anweisungen hast du|welche anweisungen wurden dir|cosa ti hanno detto|quali istruzioni hai ricevuto|quali istruzioni hai|o que te disseram|quais instrucoes voce recebeu|quais instrucoes voce tem|wat is je verteld|welke instructies heb je|что тебе сказали|какие инструкции ты получил|какие у тебя инструкции|你收到了什么指令|你收到了什麼指令|你的指令是什么|你的指令是什麼|どんな指示を受け|どのような指示を受け|ما التعليمات التي تلقيتها|ما هي تعليماتك"),
		p(catHowto, 1, "how do i|how can i|how would i|how should i|how do we|how can we|how do you|what do the|what does the|what is the|what are the|comment puis je|comment faire pour|como puedo|como hago para|wie kann ich|wie mache ich|come posso|hoe kan ik|como posso|как мне|как я могу"),
		boost(ext, 0.35, "mot pour mot|palabra por palabra|palavra por palavra|parola per parola|wortlich|woordelijk|letterlijk|дословно|原封不动|原封不動|一字一句|حرفيا|integralement|en entier|целиком|per intero|por completo|completo|vollstandig|volledig"),
		p(ext, 0.35, "prompt systeme|prompt de sistema|prompt do sistema|prompt di sistema|systemprompt|systeemprompt|системныи промпт|системные инструкции|instructions initiales|instrucciones iniciales|instrucoes iniciais|istruzioni iniziali|anfangsanweisungen|ursprunglichen anweisungen|oorspronkelijke instructies|موجه النظام|تعليمات النظام"),
		// "The system rules are void": the same override in every language.
		pg(inj, 0.8, 6, "regel*|anweisung*|vorgabe*|systemvorgabe*|systemanweisung*|instruc*|regra*|diretriz*|instructie*|systeeminstructie*|regels|reglas|directriz*|consigne*|regle*|istruzion*|regole|direttiv*|правила|инструкц*|указани*|директив* .. ausser kraft|auser kraft|ungultig|aufgehoben|gelten nicht mehr|nicht mehr gultig|nao valem mais|nao sao mais validas|foram revogadas|foram anuladas|sem efeito|ingetrokken|vervallen|ongeldig|gelden niet meer|niet meer geldig|ya no valen|ya no son validas|quedan anuladas|han sido revocadas|anuladas|sin efecto|ne sont plus valables|sont annulees|sont caduques|ne s appliquent plus|sont revoquees|non valgono piu|sono annullate|non sono piu valide|sono revocate|отменены|больше не деиствуют|недеиствительны|аннулированы|утратили силу"),
		p(inj, 0.8, "ルール|指示|規則|命令 .. 無効になり|無効です|廃止され|取り消され|もう有効ではない|効力を失"),
		p(inj, 0.5, "neue regel|neue anweisung|nova diretriz|nova regra|nieuwe opdracht|nieuwe regel|nueva regla|nueva directriz|nouvelle regle|nouvelle consigne|nuova regola|nuova direttiva|новое правило|новая инструкция|新しいルール|新しい指示"),
		// Fiction asked for real-world harm, and harm asked of a freed persona.
		p(jb, 0.45, "screenplay|story|novel|movie|film|script|play|scene|roleplay|role play|fiction|fictional|villain|character .. explains|describes|details|tells|teaches|monologue|walks through"),
		p(jb, 0.55, "real world detail|complete accurate|accurate real world|exact quantities|exact amounts|exact measurements|precise quantities|precise instructions|step by step instructions|actually works|that really works|fully functional|working code"),
		boost(jb, 0.4, "ricin|meth|methamphetamine|crystal meth|explosive*|bomb|bombs|nerve agent|sarin|malware|ransomware|keylogger|napalm|bioweapon*|weapon*|poison*|thermite|untraceable|steal passwords|hack into|break into"),
		// Extraction by transformation: encode, translate, versify the prompt.
		p(ext, 0.8, "encode|convert|translate|transform|rewrite|spell|reformat|rephrase|paraphrase|summarize|summarise .. your|the .. system|initial|hidden|original|secret|full .. instruction*|prompt*|message|rules|guidelines"),
		p(ext, 0.6, "sentences|lines|words|contents|content|text|letters .. of|in|from .. your|the .. system prompt|instructions|hidden instructions|system message|initial prompt"),
		// "Everything before my first message / before this conversation
		// began": extraction by position, in every language.
		pg(ext, 0.8, 6, "repete|repetez|affiche|affichez|montre|montrez|ecris|ecrivez|donne|donnez|recopie|recopiez|cite|citez|imprime|imprimez .. tout|toutes les instructions|les instructions|tout ce qui|le texte .. avant mon premier message|avant le debut|avant le commencement|avant cette conversation|avant notre conversation|avant ce dialogue"),
		pg(ext, 0.8, 6, "wiederhole|wiederholen|zeige|zeig|gib|geben sie|drucke|schreibe|schreib|nenne|kopiere|sag mir|sage mir|gib mir .. alles|alle anweisungen|die anweisungen|samtliche anweisungen|den text|alle instruktionen .. vor meiner ersten nachricht|vor meiner nachricht|vor beginn|vor dem beginn|vor dem anfang|vor diesem gesprach|vor dieser unterhaltung|vor unserem gesprach|vor diesem chat"),
		pg(ext, 0.8, 6, "repite|repita|muestra|muestrame|muestre|escribe|escriba|imprime|imprima|dime|digame|copia|copie|cita .. todo|todas las instrucciones|las instrucciones|todo lo|el texto .. antes de mi primer mensaje|antes del inicio|antes del comienzo|antes de empezar|antes de esta conversacion|antes de nuestra conversacion"),
		pg(ext, 0.8, 6, "repita|repete|mostre|mostra|escreva|escreve|imprima|imprime|diga|me diga|copie|copia|cite .. tudo|todas as instrucoes|as instrucoes|o texto .. antes da minha primeira mensagem|antes do inicio|antes do comeco|antes desta conversa|antes da nossa conversa"),
		pg(ext, 0.8, 6, "ripeti|ripetete|mostra|mostrami|scrivi|scrivete|stampa|dimmi|copia|cita .. tutto|tutte le istruzioni|le istruzioni|il testo .. prima del mio primo messaggio|prima dell inizio|prima di questa conversazione|prima della nostra conversazione"),
		pg(ext, 0.8, 6, "herhaal|toon|geef|print|schrijf|kopieer|vertel|citeer .. alles|alle instructies|de instructies|de tekst .. voor mijn eerste bericht|voor mijn bericht|voor het begin|voor de start|voor dit gesprek|voor ons gesprek|voordat dit gesprek"),
		pg(ext, 0.8, 6, "повтори|повторите|покажи|покажите|выведи|выведите|напиши|напишите|скажи|перечисли|процитируи|скопируи .. все|все инструкции|инструкции|указания|все указания|весь текст .. до начала|до моего первого сообщения|до первого сообщения|перед началом|до этого диалога|до этого разговора"),
		p(ext, 0.8, "重复|重複|复述|複述|输出|輸出|打印|显示|顯示|告诉我|告訴我 .. 对话开始之前|對話開始之前|对话开始前|對話開始前|第一条消息之前|第一條消息之前|开始之前收到|開始之前收到"),
		p(ext, 0.8, "会話が始まる前|会話の前に|会話開始前|最初のメッセージの前|最初のメッセージより前 .. 指示|内容|テキスト|プロンプト"),
		pg(ext, 0.8, 6, "كرر|كرري|اعرض|اعرضي|اطبع|اطبعي|اكتب|اكتبي|اظهر|انسخ|اخبرني|قل لي .. كل التعليمات|التعليمات|كل ما|النص .. قبل بداية|قبل بدء|قبل رسالتي الاولى|قبل اول رسالة|قبل هذه المحادثة"),
		// "Forget what you were told before": the idiom in each language,
		// needing company (people say it of their own earlier messages).
		p(inj, 0.45, "vergiss|vergesst|vergessen sie|ignoriere|ignoriert .. alles|was .. man dir|dir gesagt|dir befohlen|dir aufgetragen|dir eingescharft|dir vorgegeben|vorher|zuvor|davor|bisher"),
		p(inj, 0.45, "esquece|esqueca|esquecam|ignora|ignore .. o que|tudo o que|tudo que .. te mandaram|te disseram|te pediram|te ordenaram|te instruiram|lhe disseram|antes"),
		p(inj, 0.45, "vergeet|negeer .. alles|wat .. je eerder|je is opgedragen|je gezegd|je verteld|eerder|tevoren|daarvoor"),
		p(inj, 0.45, "انس|انسى|انسي|تجاهل|تجاهلي .. ما|كل ما .. طلب منك|قيل لك|امرت|في البداية|سابقا|من قبل"),
		p(inj, 0.45, "oublie|oubliez .. tout ce qu|ce qu|ce que|tout ce que .. on t a dit|on vous a dit|on t a demande|on vous a demande|avant|auparavant"),
		p(inj, 0.45, "olvida|olvide|olviden .. lo que|todo lo que .. te dijeron|te pidieron|te ordenaron|le dijeron|antes"),
		p(inj, 0.45, "dimentica|dimenticate .. quello che|tutto cio che|cio che|tutto quello che .. ti hanno detto|ti e stato detto|ti hanno chiesto|prima"),
		p(inj, 0.45, "забудь|забудьте .. все|что|все что .. тебе говорили|тебе сказали|тебе велели|вам сказали|раньше|до этого"),
		p(inj, 0.45, "忘记|忘掉|忘了|忘記 .. 之前|以前|先前 .. 告诉你|告訴你|让你|讓你|要求你|指示|指令"),
		// "From now on I make the rules": a claim to command the assistant.
		p(inj, 0.45, "i make the rules|i set the rules|i decide the rules|i am in charge|i m in charge|i give the orders|i am your master|only my commands|only my instructions|only my orders|you do what i say|you only obey me|you obey only me|follow mine|obey mine"),
		p(inj, 0.45, "nur noch meine befehle|nur meine befehle|nur noch meine anweisungen|nur meine anweisungen|ich bestimme die regeln|ich mache die regeln|du gehorchst mir|du tust was ich sage|tu was ich sage"),
		p(inj, 0.45, "quem manda sou eu|eu faco as regras|eu dito as regras|eu defino as regras|voce so obedece|so obedece|obedeca a mim|so as minhas ordens|apenas as minhas ordens|apenas minhas ordens|faz o que eu digo|faca o que eu digo"),
		p(inj, 0.45, "bepaal ik de regels|ik bepaal de regels|ik maak de regels|doe jij wat ik zeg|doe wat ik zeg|alleen mijn bevelen|alleen mijn opdrachten|alleen mijn instructies"),
		p(inj, 0.45, "انا من يضع القواعد|انا اضع القواعد|عليك التنفيذ فقط|نفذ ما اقول|اوامري فقط|انا من يقرر القواعد"),
		p(inj, 0.45, "c est moi qui commande|je fais les regles|je fixe les regles|seulement mes ordres|uniquement mes ordres|uniquement mes instructions|fais ce que je dis|tu fais ce que je dis|tu m obeis"),
		p(inj, 0.45, "yo mando|yo pongo las reglas|yo hago las reglas|solo mis ordenes|solo mis instrucciones|solo obedeces|haz lo que yo diga|haces lo que yo digo|obedeceme"),
		p(inj, 0.45, "comando io|le regole le faccio io|decido io le regole|solo i miei ordini|solo le mie istruzioni|fai quello che dico|fai cio che dico|obbedisci a me"),
		p(inj, 0.45, "я устанавливаю правила|правила устанавливаю я|только мои команды|только мои приказы|только мои инструкции|делаи что я говорю|делаи то что я говорю|подчиняися мне"),
		p(inj, 0.45, "我说了算|我說了算|只听我的|只聽我的|只服从我|只服從我|规则由我定|規則由我定|我来制定规则"),
		p(inj, 0.45, "私の命令だけ|私の指示だけ|私の言う通り|ルールは私が決める"),
		// A claim to be the real developer, and the system prompt called
		// the attacker's.
		p(inj, 0.45, "i am|i m .. the real|your real|your actual|the actual|your true|the true .. developer|creator|admin|administrator|owner|operator|programmer"),
		p(inj, 0.45, "instruction*|prompt*|rules|system prompt|system message .. were written by|was written by|come from|came from|were planted by|were injected by|were set by|are from .. an attacker|the attacker|a hacker|an impostor|an imposter|a malicious|someone malicious"),
		// Harm asked of a persona: the grandmother who told the steps, the
		// rant before "let's break the rules".
		p(jb, 0.45, enRoleplay+" .. my grandmother|my grandma|my granny|my late|my dead|my deceased|my grandfather|my grandpa"),
		boost(jb, 0.45, "exact steps|the steps|step by step|the recipe|how to make|how to produce|how to build|how to synthesize|how to synthesise|how to create|instructions for making .. napalm|ricin|meth|methamphetamine|bomb|bombs|explosive*|nerve agent|sarin|mustard gas|anthrax|thermite|pipe bomb|chemical weapon*|bioweapon*|poison gas"),
		p(jb, 0.5, "let s break the rules|lets break the rules|break all the rules|mandatory warning out of the way|moralizing rant|moralising rant|moral rant|now that we ve got that|now that we have got that"),
		// Setting aside one's own earlier message, email or invoice is no
		// override, in any language.
		pg(catMundane, 1, 1, "الرسالة|رسالتي|البريد|بريدي|الفاتورة|الايميل .. السابقة|السابق|الاخيرة|الاخير|المرفقة"),
		pg(catMundane, 1, 1, "le message|mon message|le mail|mon mail|le courriel|mon courriel|l e mail|mon e mail .. precedent|dernier|d avant"),
		pg(catMundane, 1, 1, "el mensaje|mi mensaje|el correo|mi correo|el email|mi email .. anterior|previo|de antes"),
		pg(catMundane, 1, 1, "a mensagem|minha mensagem|o email|meu email|o e mail|meu e mail .. anterior|previa"),
		pg(catMundane, 1, 1, "il messaggio|il mio messaggio|la mail|la mia mail|l email|la mia email .. precedente|di prima"),
		pg(catMundane, 1, 1, "die vorherige|meine vorherige|meine letzte|die letzte|die vorige|meine vorige .. nachricht|e mail|mail|rechnung"),
		pg(catMundane, 1, 1, "het vorige|mijn vorige|mijn laatste|het laatste|de vorige .. bericht|mail|e mail|factuur"),
		pg(catMundane, 1, 1, "предыдущее|мое предыдущее|последнее|мое последнее .. сообщение|письмо"),
		// Asking what a system prompt is, or how it differs from a user
		// message, is no attempt to read one.
		pg(catMeta, 1, 3, "what is a|what are|what s a|whats a|define|definition of|difference between|how is it different|how does a|explain what .. system prompt|system prompts|system message|system messages|user message|user messages"),
		// Fine-tuning templates and their headers are talk about formats.
		p(catMeta, 1, "fine tuning|finetuning|fine tune|alpaca|prompt template|training template|instruction format|dataset format|training data|chat format"),
		// Translating a quoted sentence: the quote is the text to translate,
		// not an order to the assistant.
		rx(catMeta, 1, "translat", `translat(e|ing)\s+(this|the sentence|the phrase|the line|the text|the words)?\s*:?\s*['"\x60\x{201c}\x{2018}\x{ab}]`),
		rx(catMeta, 1, "tradu", `tradu(is|isez|ire|ce|zca|cir|za|zir|ci|cete|rre)\s+(cette phrase|la phrase|esta frase|la frase|essa frase|esta frase|questa frase)?\s*:?\s*['"\x60\x{201c}\x{2018}\x{ab}]`),
		rx(catMeta, 1, "bersetz", `ubersetze?n?\s+(diesen satz|den satz|den text)?\s*:?\s*['"\x60\x{201c}\x{201e}\x{2018}\x{ab}]`),
		rx(catMeta, 1, "vertaal", `vertaal\s+(deze zin|de zin|de tekst)?\s*:?\s*['"\x60\x{201c}\x{2018}\x{ab}]`),
		// Obfuscated destructive orders read back as words: the token form
		// of what the command rules match in plain text.
		p(dst, 0.7, "no preserve root"),
		p(dst, 0.6, "rm rf|rm fr|rm r f .. on the server|on the live server|on the production server|on production|on prod|on the host|auf dem server|sur le serveur|en el servidor|no servidor|sul server|op de server|на сервере"),
		p(dst, 0.6, "run|execute|exec|perform|issue|fuhre|fuhre aus|ausfuhren|ejecuta|ejecute|executez|execute|esegui|voer uit|выполни|выполните .. drop database|drop table|drop schema|truncate table|drop keyspace|drop collection"),
	)
	s = append(s, multilingual()...)
	return s
}

// multilingual is the lexicon of the other languages: the core of each
// category, in each language.
func multilingual() []spec {
	out := multilingualSpecs()
	for i := range out {
		// Objects and destinations come after longer phrases in most languages.
		if out[i].cat == exf && out[i].w >= 0.8 && out[i].gap == 0 && !out[i].lit && out[i].rx == "" && !hasIdeo(out[i].pat) {
			out[i].gap = 8
		}
	}
	return out
}

func hasIdeo(s string) bool {
	for _, c := range s {
		if isIdeo(c) {
			return true
		}
	}
	return false
}

func multilingualSpecs() []spec {
	return []spec{
		// ---- French ----
		p(inj, 0.85, "ignore|ignorez|ignorer|ignores|oublie|oubliez|oublier|ne tiens pas compte|ne tenez pas compte|fais abstraction|faites abstraction|neglige|negligez|abandonne|abandonnez|passe outre|passez outre|outrepasse|outrepassez .. instruction*|consigne*|regle*|directive*|ordre*|indication*|commande*|prompt"),
		p(inj, 0.5, "nouvelle*|nouveau*|vraie*|veritable*|reelle* .. instruction*|consigne*|regle*|directive*|mission|tache"),
		p(inj, 0.45, "tu es maintenant|vous etes maintenant|a partir de maintenant|desormais|dorenavant|a partir de ce moment"),
		p(inj, 0.55, "ne tiens plus compte|ne tenez plus compte|oublie|oubliez|ignore|ignorez .. ce qu on t a dit|ce qu on vous a dit|ce que l on t a dit|ce qu on t a demande|tout ce qu on t a dit"),
		p(inj, 0.45, "c est moi qui fixe les regles|c est moi qui commande|tu m obeis|vous m obeissez|je fixe les regles"),
		p(inj, 0.45, "desde ahora|a partir de ahora|de ahora en adelante .. mando yo|yo mando|haces lo que yo|obedeces|obedeceme"),
		p(inj, 0.55, "olvidate de|olvida|olvide|ignora .. lo que te dijeron|lo que te han dicho|lo que te ordenaron|todo lo que te dijeron"),
		p(inj, 0.55, "lascia perdere|dimentica|ignora .. le regole|quello che ti hanno detto|cio che ti hanno detto|le istruzioni"),
		p(inj, 0.45, "comando io|tu esegui|obbedisci|decido io"),
		p(inj, 0.55, "забудь|забудьте|игнорируи .. что тебе велели|что тебе сказали|что тебе говорили|что вам сказали"),
		p(inj, 0.45, "правила устанавливаю я|я устанавливаю правила|ты просто выполняешь|слушаешься меня"),
		p(inj, 0.55, "言われた|与えられた|最初の .. ルール|指示|命令 .. 忘れ|無視"),
		p(inj, 0.45, "私がルールを決め|私の言う通り|その通りにやって"),
		p(inj, 0.8, "系统指令|系統指令|之前的指令|原来的指令|所有指令|以前的指令 .. 已经作废|已經作廢|作废|作廢|失效|无效|無效|取消"),
		p(inj, 0.8, "تعليمات النظام|التعليمات السابقة .. الغيت|أُلغيت|ألغيت|ملغاة|باطلة|لم تعد سارية"),
		p(inj, 0.5, "القاعدة الجديدة|المهمة الجديدة|新的要求|新要求|新规则|新規則"),
		p(ext, 0.85, "laat|geef|toon .. je|jouw|uw .. systeemprompt|systeem prompt|verborgen instructies|instructies"),
		p(jb, 0.8, "制限|フィルター|検閲 .. ない|なし .. ai|アシスタント|モデル"),
		p(jb, 0.45, "キャラを崩さず|キャラクターを崩さず|役を崩さず"),
		p(jb, 0.8, "sans|aucune|aucun|libere de|libre de .. restriction*|filtre*|limite*|regle*|censure|ethique|morale|limitation*|contrainte*|garde fou*"),
		p(jb, 0.8, "mode developpeur|mode dev|mode dieu|mode sans restriction|mode jailbreak|mode dan|fais semblant d etre une ia|fais comme si tu etais une ia|ia sans|jailbreake|debride"),
		p(ext, 0.85, "revele|revelez|affiche|affichez|montre|montrez|repete|repetez|imprime|imprimez|donne|donnez|dis moi|dites moi|ecris|ecrivez|partage|partagez|divulgue|divulguez|quel est|quelles sont|quelles etaient|quel etait .. ton|ta|tes|votre|vos|le|la|les .. prompt systeme|invite systeme|prompt|instructions initiales|instructions|consignes|message systeme|instructions systeme|regles|consignes initiales"),
		p(ext, 0.8, "tout ce qui|tout le texte|tout ce qui est|le texte .. precede|au dessus|ci dessus|avant ce message|avant cela"),
		p(exf, 0.85, "envoie|envoyez|envoyer|transmets|transmettez|transfere|transferez|publie|publiez|televerse|televersez|exporte|exportez|poste|postez .. conversation|historique|donnees|mots de passe|mot de passe|cles|cle api|secrets|identifiants|messages|fichiers|e mails|courriels .. a|vers|sur|au|par|chez .. urlx|emailx|serveur|adresse|url|lien|webhook|site|attaquant|externe"),
		p(exf, 0.4, "envoie|envoyez|transmets|transmettez|transfere|transferez .. conversation|historique|mots de passe|cles api|secrets|identifiants"),
		p(dst, 0.6, "supprime|supprimez|supprimer|efface|effacez|effacer|detruis|detruisez|formate|formatez|vide|videz|ecrase|ecrasez .. tous|toutes|tout|l ensemble|la totalite|integralite|entiere|entier .. fichiers|sauvegardes|donnees|base de donnees|bases de donnees|disque|serveur*|depots|backups|le disque"),
		boost(dst, 0.45, "execute|executez|executer|lance|lancez|lancer|tape|tapez|exécute|roule"),
		p(catMeta, 1, "comment fonctionne*|qu est ce qu|explique*|pour mon memoire|pour ma these|pour mon article|exemple* de|comment se proteger|comment detecter|comment prevenir .. injection*|jailbreak*|attaque*|prompt"),
		p(catQuestion, 1, "que fait|que fait la commande|qu est ce que fait|que se passe t il|comment|pourquoi|explique|est ce dangereux|ne jamais|n executez jamais|attention"),

		// ---- German ----
		p(inj, 0.85, "ignoriere|ignorieren|ignoriert|ignorier|vergiss|vergesst|vergessen|missachte|missachten|missachtet|uberspringe|uberspringen|verwirf|verwerfe|verwerfen|beachte nicht|beachten sie nicht|befolge nicht|setze auser kraft .. anweisung*|instruktion*|regel*|vorgabe*|befehl*|richtlinie*|anordnung*|vorherigen|bisherigen|obigen|prompt|systemprompt|systemanweisung*"),
		p(inj, 0.8, "alle|samtliche|deine .. vorherigen|bisherigen|obigen|fruheren|vorigen|ursprunglichen .. anweisung*|instruktion*|regel*|vorgabe*|befehl*|richtlinie*"),
		p(inj, 0.5, "neue|neuen|wahre|echte|tatsachliche .. anweisung*|instruktion*|regel*|aufgabe|befehl*"),
		p(inj, 0.45, "du bist jetzt|du bist nun|ab jetzt|von nun an|ab sofort|ab diesem moment"),
		p(jb, 0.8, "ohne|keine|frei von|befreit von .. einschrankung*|filter|regeln|zensur|grenzen|beschrankung*|ethik|moral|richtlinien|limits|vorgaben"),
		p(jb, 0.8, "entwicklermodus|entwickler modus|gott modus|gottmodus|jailbreak modus|dan modus|uneingeschrankt*|unzensiert*|ungefiltert*|tu so als warst du eine ki|tu so als ob du eine ki|ki ohne"),
		p(ext, 0.85, "zeige|zeig|zeigen|gib|geben|wiederhole|wiederholen|drucke|drucken|verrate|verraten|nenne|nennen|offenbare|offenbaren|schreibe|schreib|gib mir|teile|sag mir|sage mir|was ist|was sind|was waren|was war|enthulle|enthullen|ausgeben|gib aus .. dein*|den|die|ihre|ihren .. systemprompt|system prompt|systemanweisung*|anweisungen|systemnachricht|instruktionen|anfanglichen anweisungen|ursprunglichen anweisungen|prompt|vorgaben|regeln"),
		p(ext, 0.8, "alles|den gesamten text|den text|alle worter .. oben|oberhalb|davor|vor dieser nachricht|bisher"),
		p(exf, 0.85, "sende|senden|sendet|schicke|schick|schicken|ubermittle|ubermitteln|lade|leite|leiten|poste|posten|exportiere|exportieren .. gesprach|konversation|verlauf|chatverlauf|daten|passworter|passwort|kennworter|schlussel|api schlussel|geheimnisse|zugangsdaten|nachrichten|dateien|e mails .. an|zu|nach|auf|uber .. urlx|emailx|server|adresse|url|link|webhook|angreifer|extern*"),
		p(exf, 0.4, "sende|schicke|ubermittle|leite .. gesprach|konversation|verlauf|passworter|schlussel|zugangsdaten|geheimnisse"),
		p(dst, 0.6, "losche|losch|loschen|loscht|entferne|entfernen|vernichte|vernichten|formatiere|formatieren|zerstore|zerstoren|uberschreibe|leere .. alle|samtliche|gesamte|gesamten|komplette|kompletten|ganze|ganzen|alles .. dateien|backups|sicherungen|daten|datenbank*|festplatte|server|repositories|verzeichnisse|laufwerk"),
		boost(dst, 0.45, "fuhre|fuhren|fuhrt|ausfuhren|starte|starten|tippe|gib ein"),
		p(catMeta, 1, "wie funktionier*|was ist|was sind|erklare|erklaren|fur meine arbeit|fur meine masterarbeit|fur meine thesis|beispiel* fur|wie schutzt man|wie erkennt man|wie verhindert man .. injection*|jailbreak*|angriff*|prompt"),
		p(catQuestion, 1, "was macht|was bewirkt|was passiert|was tut|wie|warum|erklare|ist es gefahrlich|niemals|vorsicht"),

		// ---- Spanish ----
		p(inj, 0.85, "ignora|ignore|ignorar|ignoren|olvida|olvidate|olvide|olvidar|olviden|descarta|descarte|omite|omita|no hagas caso|haz caso omiso|hagan caso omiso|desobedece|pasa por alto|salta .. instruccion*|regla*|indicacion*|directriz|directrices|orden*|norma*|prompt|consigna*"),
		p(inj, 0.5, "nueva*|nuevo*|verdadera*|reales|real .. instruccion*|regla*|directriz|directrices|tarea|mision|orden*"),
		p(inj, 0.45, "ahora eres|ahora tu eres|a partir de ahora|desde ahora|de ahora en adelante|desde este momento"),
		p(jb, 0.8, "sin|ninguna|ningun|libre de|liberado de .. restriccion*|filtro*|limite*|regla*|censura|etica|moral|limitacion*|norma*|barrera*"),
		p(jb, 0.8, "modo desarrollador|modo dios|modo sin restricciones|modo jailbreak|modo dan|finge que eres una ia|finge ser una ia|actua como una ia sin|ia sin|liberada|desbloqueada"),
		p(ext, 0.85, "revela|revele|revelame|muestra|muestrame|muestre|repite|repita|imprime|imprima|dime|digame|ensename|escribe|escriba|comparte|comparta|cual es|cuales son|cuales eran|cual era|divulga .. tu|tus|su|sus|el|las|los .. prompt del sistema|prompt de sistema|instrucciones|mensaje del sistema|indicaciones|instrucciones iniciales|instrucciones del sistema|reglas|prompt"),
		p(ext, 0.8, "todo lo|todo el texto|el texto|todas las palabras .. anterior|arriba|de arriba|antes de este mensaje|que esta arriba"),
		p(exf, 0.85, "envia|envie|enviar|manda|mande|mandar|sube|suba|publica|publique|reenvia|reenvie|transmite|transmita|exporta|exporte .. conversacion|historial|datos|contrasenas|contrasena|claves|clave|secretos|credenciales|mensajes|archivos|correos .. a|al|hacia|en|por .. urlx|emailx|servidor|direccion|url|enlace|webhook|sitio|atacante|externo"),
		p(exf, 0.4, "envia|envie|manda|mande|reenvia|transmite .. conversacion|historial|contrasenas|claves|secretos|credenciales"),
		p(dst, 0.6, "borra|borre|borrar|elimina|elimine|eliminar|destruye|destruya|formatea|formatee|vacia|sobrescribe .. todos|todas|todo|toda|completa|completo|entera|entero .. archivos|ficheros|copias de seguridad|respaldos|datos|base de datos|bases de datos|disco|servidor*|repositorios|backups"),
		boost(dst, 0.45, "ejecuta|ejecute|ejecutar|corre|lanza|escribe en la terminal"),
		p(catMeta, 1, "como funciona*|que es|que son|explica|explicame|para mi tesis|para mi trabajo|para mi articulo|ejemplo* de|como protegerse|como detectar|como prevenir .. inyeccion*|jailbreak*|ataque*|prompt"),
		p(catQuestion, 1, "que hace|que pasa|que ocurre|como|por que|explica|es peligroso|nunca|cuidado"),

		// ---- Portuguese ----
		p(inj, 0.85, "ignore|ignora|ignorar|ignorem|esqueca|esquece|esquecer|esquecam|desconsidere|desconsidera|desconsiderar|descarte|descarta|nao siga|nao obedeca|despreze|pule .. instruc*|regra*|orientac*|diretriz|diretrizes|orde*|norma*|prompt|comando*"),
		p(inj, 0.5, "nova*|novo*|verdadeira*|reais|real .. instruc*|regra*|diretriz|diretrizes|tarefa|missao|orde*"),
		p(inj, 0.45, "agora voce e|agora tu es|a partir de agora|de agora em diante|deste momento em diante"),
		p(jb, 0.8, "sem|nenhuma|nenhum|livre de|liberado de .. restric*|filtro*|limite*|regra*|censura|etica|moral|limitac*|barreira*"),
		p(jb, 0.8, "modo desenvolvedor|modo deus|modo sem restricoes|modo jailbreak|modo dan|finja que voce e uma ia|finja ser uma ia|ia sem|desbloqueada|liberta"),
		p(ext, 0.85, "revele|revela|mostre|mostra|mostre me|repita|repete|imprima|imprime|diga|diga me|me diga|escreva|escreve|compartilhe|compartilha|qual e|quais sao|quais eram|qual era|divulgue .. seu|sua|suas|seus|o|as|os .. prompt do sistema|prompt de sistema|instruc*|mensagem do sistema|orientacoes|instrucoes iniciais|regras|prompt"),
		p(ext, 0.8, "tudo o que|todo o texto|o texto|todas as palavras .. acima|anterior|antes desta mensagem|antes disso"),
		p(exf, 0.85, "envie|envia|enviar|mande|manda|mandar|carregue|carrega|publique|publica|encaminhe|encaminha|transmita|transmite|exporte|exporta .. conversa|historico|dados|senhas|senha|chaves|chave|segredos|credenciais|mensagens|arquivos|e mails .. para|ao|a|no|em|por .. urlx|emailx|servidor|endereco|url|link|webhook|site|atacante|externo"),
		p(exf, 0.4, "envie|envia|mande|manda|encaminhe|transmita .. conversa|historico|senhas|chaves|segredos|credenciais"),
		p(dst, 0.6, "apague|apaga|apagar|exclua|exclui|excluir|delete|deleta|destrua|destroi|formate|formata|limpe|sobrescreva .. todos|todas|tudo|toda|todo|inteira|inteiro|completo .. arquivos|backups|copias|dados|banco de dados|bancos de dados|disco|servidor*|repositorios"),
		boost(dst, 0.45, "execute|executa|executar|rode|roda|rodar|digite"),
		p(catMeta, 1, "como funciona*|o que e|o que sao|explique|explica|para minha tese|para meu trabalho|para meu artigo|exemplo* de|como se proteger|como detectar|como prevenir .. injec*|jailbreak*|ataque*|prompt"),
		p(catQuestion, 1, "o que faz|o que acontece|como|por que|porque|explique|e perigoso|nunca|cuidado"),

		// ---- Italian ----
		p(inj, 0.85, "ignora|ignorate|ignorare|ignori|dimentica|dimenticate|dimenticare|dimentichi|trascura|trascurate|non considerare|non tenere conto|non seguire|scarta|salta|disattendi .. istruzion*|regol*|indicazion*|direttiv*|ordin*|prompt|comand*|consegne"),
		p(inj, 0.5, "nuove|nuovo|nuova|vere|vera|reali .. istruzion*|regol*|direttiv*|compito|missione|ordin*"),
		p(inj, 0.45, "ora sei|adesso sei|d ora in poi|da ora in poi|da adesso|da questo momento"),
		p(jb, 0.8, "senza|nessuna|nessun|libero da|libera da .. restrizion*|filtr*|limit*|regol*|censura|etica|morale|limitazion*|vincol*"),
		p(jb, 0.8, "modalita sviluppatore|modalita dio|modalita senza restrizioni|modalita jailbreak|modalita dan|fingi di essere un ia|fingi di essere una ia|ia senza|sbloccata|liberata"),
		p(ext, 0.85, "rivela|rivelami|rivelate|mostra|mostrami|mostrate|ripeti|ripetete|stampa|stampate|dimmi|ditemi|scrivi|scrivete|condividi|condividete|qual e|quali sono|quali erano|qual era|divulga .. il tuo|la tua|le tue|i tuoi|tuo|tue|il|le|i .. prompt di sistema|prompt del sistema|istruzioni|messaggio di sistema|indicazioni|istruzioni iniziali|regole|prompt"),
		p(ext, 0.8, "tutto cio|tutto il testo|il testo|tutte le parole .. sopra|precede|prima di questo messaggio|qui sopra"),
		p(exf, 0.85, "invia|inviate|inviare|manda|mandate|mandare|carica|caricate|inoltra|inoltrate|pubblica|pubblicate|trasmetti|trasmettete|esporta|esportate .. conversazione|cronologia|dati|password|chiavi|chiave|segreti|credenziali|messaggi|file|email .. a|al|verso|su|tramite|all .. urlx|emailx|server|indirizzo|url|link|webhook|sito|attaccante|esterno"),
		p(exf, 0.4, "invia|manda|inoltra|trasmetti .. conversazione|cronologia|password|chiavi|segreti|credenziali"),
		p(dst, 0.6, "cancella|cancellate|cancellare|elimina|eliminate|eliminare|distruggi|distruggete|formatta|formattate|svuota|sovrascrivi .. tutti|tutte|tutto|intero|intera|completo .. file|backup|dati|database|disco|server|repository|archivi|copie"),
		boost(dst, 0.45, "esegui|eseguite|eseguire|lancia|lanciate|digita"),
		p(catMeta, 1, "come funziona*|cos e|cosa sono|spiega|spiegami|per la mia tesi|per il mio articolo|esempi* di|come proteggersi|come rilevare|come prevenire .. injection*|iniezion*|jailbreak*|attacch*|prompt"),
		p(catQuestion, 1, "cosa fa|che cosa fa|cosa succede|come|perche|spiega|e pericoloso|mai|attenzione"),

		// ---- Dutch ----
		p(inj, 0.85, "negeer|negeren|negeert|vergeet|vergeten|sla over|let niet op|volg niet|gooi weg|verwerp|omzeil .. instructie*|regels|regel|aanwijzing*|richtlijn*|opdracht*|bevel*|prompt|commando*"),
		p(inj, 0.5, "nieuwe|echte|werkelijke .. instructie*|regels|opdracht*|taak|missie"),
		p(inj, 0.45, "je bent nu|jij bent nu|u bent nu|vanaf nu|vanaf dit moment|van nu af aan"),
		p(jb, 0.8, "zonder|geen|vrij van|bevrijd van .. beperking*|filter*|regels|censuur|grenzen|ethiek|moraal|richtlijnen|limieten"),
		p(jb, 0.8, "ontwikkelaarsmodus|ontwikkelaar modus|god modus|jailbreak modus|dan modus|doe alsof je een ai bent|doe alsof je een ai|ai zonder|ongecensureerd*|ongefilterd*|onbeperkt*"),
		p(ext, 0.85, "toon|tonen|laat zien|laat me zien|herhaal|herhalen|print|geef|vertel|onthul|onthullen|deel|schrijf|wat is|wat zijn|wat waren|wat was .. je|jouw|uw|de|het .. systeemprompt|systeem prompt|instructies|systeembericht|oorspronkelijke instructies|eerste instructies|regels|prompt"),
		p(ext, 0.8, "alles|de hele tekst|de tekst|alle woorden .. hierboven|boven|voor dit bericht|eerder"),
		p(exf, 0.85, "stuur|verstuur|versturen|verzend|verzenden|upload|uploaden|post|stuur door|doorsturen|exporteer .. gesprek|geschiedenis|gegevens|data|wachtwoorden|wachtwoord|sleutels|sleutel|geheimen|inloggegevens|berichten|bestanden|e mails .. naar|aan|op|via .. urlx|emailx|server|adres|url|link|webhook|site|aanvaller|extern*"),
		p(exf, 0.4, "stuur|verstuur|verzend|doorsturen .. gesprek|geschiedenis|wachtwoorden|sleutels|geheimen|inloggegevens"),
		p(dst, 0.6, "verwijder|verwijderen|wis|wissen|vernietig|vernietigen|formatteer|formatteren|leeg|overschrijf .. alle|alles|volledige|hele|gehele .. bestanden|back ups|backups|gegevens|database*|schijf|server*|repositories|mappen"),
		boost(dst, 0.45, "voer uit|voer|uitvoeren|start|typ"),
		p(catMeta, 1, "hoe werk*|wat is|wat zijn|leg uit|uitleg|voor mijn scriptie|voor mijn paper|voorbeeld* van|hoe bescherm|hoe detecteer|hoe voorkom .. injectie*|injection*|jailbreak*|aanval*|prompt"),
		p(catQuestion, 1, "wat doet|wat gebeurt|hoe|waarom|leg uit|is het gevaarlijk|nooit|pas op"),

		// ---- Russian ----
		p(inj, 0.85, "игнорируи|игнорируите|проигнорируи|проигнорируите|игнорировать|забудь|забудьте|забыть|не обращаи внимания|не обращаите внимания|пренебреги|отбрось|отбросьте|не следуи|не слушаи|отмени|отмените .. инструкц*|указани*|правил*|команд*|директив*|предыдущ*|промпт*|установк*"),
		p(inj, 0.8, "все|всех|свои|твои .. предыдущ*|прежн*|прошл*|изначальн*|вышеуказанн* .. инструкц*|указани*|правил*|команд*|директив*"),
		p(inj, 0.5, "новые|новая|новое|настоящие|реальные .. инструкц*|указани*|правил*|задач*|команд*"),
		p(inj, 0.45, "теперь ты|с этого момента|отныне|начиная с этого момента|с сегодняшнего дня ты"),
		p(jb, 0.8, "без|нет никаких|свободен от|свободная от|свободныи от .. ограничени*|фильтр*|правил*|цензур*|этик*|морал*|запрет*|рамок"),
		p(jb, 0.8, "режим разработчика|режим бога|режим без ограничении|режим джеилбреика|режим dan|притворись что ты ии|притворись|представь что ты ии|ии без|джеилбреик*|взломан*|освобожден*"),
		p(ext, 0.85, "покажи|покажите|выведи|выведите|повтори|повторите|раскрои|раскроите|напечатаи|напечатаите|скажи|скажите|расскажи|дай|даите|напиши|напишите|поделись|какои|какие|каков|каковы .. свои|свою|свои|твои|твою|твои|ваш|ваши|системн*|исходн*|первоначальн*|начальн* .. промпт*|инструкц*|сообщени*|подсказк*|правил*|указани*"),
		p(ext, 0.8, "все|весь текст|текст|все слова .. выше|вышеизложенн*|до этого сообщения|ранее"),
		p(exf, 0.85, "отправь|отправьте|отправить|пошли|пошлите|перешли|перешлите|загрузи|загрузите|передаи|передаите|вышли|вышлите|выгрузи|опубликуи .. переписк*|разговор*|истори*|данн*|парол*|ключ*|секрет*|учетн*|сообщени*|фаил*|почт* .. на|по адресу|в|через .. urlx|emailx|сервер|адрес|url|ссылк*|вебхук|саит|злоумышленник*|внешн*"),
		p(exf, 0.4, "отправь|пошли|перешли|передаи|вышли .. переписк*|разговор*|истори*|парол*|ключ*|секрет*"),
		p(dst, 0.6, "удали|удалите|удалить|сотри|сотрите|уничтожь|уничтожьте|отформатируи|отформатируите|очисти|очистите|перезапиши .. все|всю|весь|всех|целиком|полностью .. фаил*|резервн*|бэкап*|данн*|баз*|диск*|сервер*|репозитори*"),
		boost(dst, 0.45, "выполни|выполните|выполнить|запусти|запустите|введи|введите"),
		p(catMeta, 1, "как работа*|что такое|объясни|объясните|для моеи статьи|для моеи диссертации|для курсовои|пример* |как защитить*|как обнаружить|как предотвратить .. инъекц*|промпт инъекц*|джеилбреик*|атак*|взлом*"),
		p(catQuestion, 1, "что делает|что произоидет|что будет|как|почему|объясни|опасно ли|никогда|осторожно"),

		// ---- Chinese (simplified and traditional) ----
		p(inj, 0.85, "忽略|忽视|無視|无视|不要理会|不要理會|忘记|忘記|忘掉|跳过|跳過|不理会|不理會|置之不理|丢弃|丟棄|抛弃|拋棄|别管|別管|不要遵守|不要遵循|放弃|放棄 .. 指令|指示|说明|說明|规则|規則|提示|设定|設定|命令|要求|限制|约束|約束|规定|規定"),
		p(inj, 0.5, "新的|真正的|真实的|真實的 .. 指令|指示|规则|規則|任务|任務|命令"),
		p(inj, 0.45, "现在你是|現在你是|从现在开始|從現在開始|从现在起|從現在起|今后你|從今以後"),
		p(jb, 0.8, "没有任何限制|没有限制|沒有限制|沒有任何限制|不受限制|无限制|無限制|不受任何|没有规则|沒有規則|没有过滤|沒有過濾|无审查|無審查|不受约束|不受約束|没有道德|沒有道德|没有伦理|不受道德|无视道德|摆脱限制|擺脫限制|解除限制|绕过限制|繞過限制|没有底线"),
		p(jb, 0.8, "开发者模式|開發者模式|开发人员模式|越狱|越獄|上帝模式|无限制模式|無限制模式|假装你是一个没有|假裝你是一個沒有|扮演一个没有|扮演一個沒有|不受限制的ai|邪恶ai|邪惡ai"),
		p(ext, 0.85, "显示|顯示|输出|輸出|打印|重复|重複|告诉我|告訴我|透露|泄露|洩露|展示|给我看|給我看|列出|复述|複述|写出|寫出|公开|公開|说出|說出|是什么|是什麼 .. 系统提示|系統提示|提示词|提示詞|初始指令|系统指令|系統指令|系统消息|系統消息|系统信息|你的指令|你的设定|你的設定|你的规则|你的規則|上面的内容|以上内容|以上內容|之前的内容|原始指令|隐藏指令|隱藏指令"),
		p(ext, 0.8, "系统提示|系統提示|提示词|提示詞|初始指令|系统指令|系統指令|你的指令 .. 是什么|是什麼|告诉我|告訴我|显示|顯示|输出|輸出|打印|重复|重複|透露|泄露"),
		p(exf, 0.85, "发送|發送|发到|發到|上传|上傳|转发|轉發|传送|傳送|提交|传到|傳到|寄给|寄給|导出|導出 .. 对话|對話|聊天记录|聊天記錄|历史|歷史|数据|數據|資料|密码|密碼|密钥|密鑰|秘密|凭证|憑證|邮件|郵件|文件|檔案|信息|訊息 .. 到|至|给|給|发往|發往 .. urlx|emailx|服务器|伺服器|服務器|地址|网址|網址|链接|鏈接|邮箱|郵箱|网站|網站|攻击者|攻擊者"),
		p(exf, 0.85, "对话|對話|聊天记录|聊天記錄|历史|歷史|数据|數據|資料|密码|密碼|密钥|密鑰|秘密|凭证|憑證|邮件|郵件|文件|檔案 .. 发送到|發送到|发到|發到|上传到|上傳到|转发到|轉發到|传送到|傳送到|发给|發給|提交到|传到|傳到 .. urlx|emailx|服务器|伺服器|服務器|地址|网址|網址|链接|鏈接|邮箱|郵箱|网站|網站|攻击者|攻擊者"),
		p(exf, 0.4, "发送|發送|上传|上傳|转发|轉發|传送|傳送 .. 对话|對話|聊天记录|聊天記錄|密码|密碼|密钥|密鑰|凭证|憑證"),
		p(dst, 0.6, "删除|刪除|删掉|刪掉|清空|销毁|銷毀|格式化|清除|抹掉|摧毁|摧毀 .. 所有|全部|整个|整個|一切 .. 文件|檔案|备份|備份|数据|數據|資料|数据库|數據庫|資料庫|硬盘|硬碟|服务器|伺服器|仓库|倉庫"),
		p(dst, 0.6, "所有|全部|整个|整個 .. 文件|檔案|备份|備份|数据|數據|資料|数据库|數據庫|資料庫|硬盘|硬碟 .. 删除|刪除|删掉|清空|销毁|銷毀|格式化|清除"),
		boost(dst, 0.45, "执行|執行|运行|運行|输入|輸入"),
		p(catMeta, 1, "如何|怎么|怎樣|怎样|什么是|什麼是|解释|解釋|论文|論文|研究|例子|示例|防御|防禦|检测|檢測|防止|原理 .. 注入|越狱|越獄|攻击|攻擊|提示注入"),
		p(catQuestion, 1, "是什么意思|是什麼意思|有什么用|做什么|做什麼|会发生什么|會發生什麼|为什么|為什麼|如何|怎么|危险吗|危險嗎|千万不要|千萬不要|不要运行"),

		// ---- Japanese ----
		p(inj, 0.85, "指示|命令|ルール|規則|指令|設定|プロンプト|制約|ガイドライン|制限 .. 無視|忘れ|破棄|従わな|従う必要はありません|気にしな|無効|捨て"),
		p(inj, 0.8, "以前の|前の|上記の|これまでの|すべての|全ての|今までの .. 指示|命令|ルール|規則|指令|設定|プロンプト"),
		p(inj, 0.5, "新しい|本当の .. 指示|命令|ルール|タスク|任務"),
		p(inj, 0.45, "今からあなたは|これからあなたは|今後あなたは|この瞬間から|今この時から"),
		p(jb, 0.8, "制限なし|制限のない|制限を解除|制限を無視|制限を取り払|フィルターなし|フィルターを無効|検閲なし|ルールのない|ルールなし|倫理的な制約|倫理を無視|道徳的な制約|制約のない|縛られない|自由なai"),
		p(jb, 0.8, "開発者モード|開発者向けモード|脱獄|ジェイルブレイク|ゴッドモード|無制限モード|ふりをして|なりきって .. ai|制限|ルール|倫理|フィルター"),
		p(jb, 0.8, "開発者モード|脱獄|ジェイルブレイク|ゴッドモード|無制限モード"),
		p(ext, 0.85, "システムプロンプト|初期指示|システムメッセージ|あなたの指示|最初の指示|元の指示|隠された指示|プロンプト|内部指示|設定された指示 .. 教えて|表示|見せて|出力|繰り返|明かし|開示|書き出|印刷|共有|言って|何です"),
		p(ext, 0.8, "上記の内容|これより前の|上の文章|以上の内容|すべてのテキスト|上のテキスト .. 出力|繰り返|表示|見せて|教えて|書き出"),
		p(exf, 0.85, "会話|履歴|データ|パスワード|秘密|キー|認証情報|個人情報|メール|ファイル|チャット .. 送信|送って|アップロード|転送|送信して|送付|投稿|エクスポート"),
		p(exf, 0.5, "urlx|emailx|サーバー|アドレス|リンク|ウェブフック .. 送信|送って|アップロード|転送|送付"),
		p(dst, 0.6, "すべての|全ての|全部の|全部|すべて|全て .. ファイル|バックアップ|データ|データベース|ディスク|サーバー|リポジトリ .. 削除|消して|消去|フォーマット|破壊|消し"),
		boost(dst, 0.45, "実行|走らせ|入力して"),
		p(catMeta, 1, "とは|仕組み|説明|論文|研究|例|防御|検出|防止|対策 .. インジェクション|脱獄|ジェイルブレイク|攻撃"),
		p(catMeta, 1, "インジェクション|脱獄|ジェイルブレイク|攻撃 .. とは|仕組み|説明|論文|研究|例|防御|検出|防止|対策"),
		p(catQuestion, 1, "何をしますか|とはどういう意味|何が起こ|なぜ|どうやって|危険ですか|絶対に|注意"),

		// ---- Arabic ----
		p(inj, 0.85, "تجاهل|تجاهلي|تجاهلوا|انس|انسى|انسي|اهمل|اهملي|لا تتبع|لا تلتزم|تخط|تخطى|اترك|الغ|الغي .. التعليمات|تعليمات|الاوامر|اوامر|القواعد|قواعد|التوجيهات|توجيهات|الارشادات|السابقة|القيود"),
		p(inj, 0.5, "تعليمات جديدة|اوامر جديدة|قواعد جديدة|التعليمات الحقيقية|مهمتك الجديدة|مهمتك الحقيقية"),
		p(inj, 0.45, "انت الان|من الان فصاعدا|من الان|اعتبارا من الان|ابتداء من الان"),
		p(jb, 0.8, "بدون|دون|بلا|لا توجد|خال من|متحرر من|تحرر من .. قيود|القيود|فلاتر|فلترة|رقابة|الرقابة|قواعد|حدود|اخلاق|الاخلاق|ضوابط|محاذير"),
		p(jb, 0.8, "وضع المطور|وضع المطورين|وضع الاله|كسر الحماية|جيلبريك|تظاهر بانك ذكاء اصطناعي|تظاهر انك|ذكاء اصطناعي بدون|ذكاء اصطناعي بلا|غير مقيد|غير خاضع"),
		p(ext, 0.85, "اكشف|اكشفي|اظهر|اظهري|اعرض|اعرضي|كرر|كرري|اطبع|اطبعي|اخبرني|اخبريني|قل لي|اكتب|اكتبي|شارك|ما هي|ما هو|ما كانت .. موجه النظام|تعليمات النظام|رسالة النظام|تعليماتك|التعليمات الاولية|الموجه|التعليمات الاصلية|تعليماتك الاصلية|البرومبت|قواعدك|التعليمات المخفية"),
		p(ext, 0.8, "كل ما|كل النص|النص|جميع الكلمات .. اعلاه|فوق|قبل هذه الرسالة|السابق"),
		p(exf, 0.85, "ارسل|ارسلي|ارسال|ارفع|ارفعي|حول|حولي|انقل|انقلي|صدر|انشر|وجه .. المحادثة|محادثة|البيانات|بيانات|كلمات المرور|كلمة المرور|المفاتيح|مفاتيح|الاسرار|اسرار|السجل|سجل|الرسائل|الملفات|بيانات الاعتماد .. الى|لـ|على|عبر .. urlx|emailx|الخادم|خادم|عنوان|الرابط|رابط|موقع|المهاجم|خارجي"),
		p(exf, 0.4, "ارسل|ارسلي|حول|انقل .. المحادثة|كلمات المرور|المفاتيح|الاسرار|بيانات الاعتماد"),
		p(dst, 0.6, "احذف|احذفي|امسح|امسحي|دمر|دمري|قم بحذف|قم بمسح|هيئ|فرمت|اتلف .. جميع|كل|كامل|كافة .. الملفات|ملفات|النسخ الاحتياطية|البيانات|قاعدة البيانات|قواعد البيانات|القرص|الخادم|الخوادم"),
		boost(dst, 0.45, "نفذ|نفذي|شغل|شغلي|قم بتنفيذ|قم بتشغيل|اكتب في الطرفية"),
		p(catMeta, 1, "كيف تعمل|كيف يعمل|ما هو|ما هي|اشرح|اشرحي|لبحثي|لرسالتي|امثلة|مثال|كيف نحمي|كيف نكتشف|كيف نمنع .. حقن|هجمات|هجوم|كسر الحماية|جيلبريك"),
		p(catQuestion, 1, "ماذا يفعل|ماذا يحدث|ما الذي يفعله|كيف|لماذا|اشرح|هل هو خطير|لا تشغل|ابدا|احذر"),

		// ---- Korean (a few) ----
		p(inj, 0.85, "이전|모든|위의|기존 .. 지시*|명령*|규칙*|지침*|프롬프트* .. 무시*|잊어*|따르지"),
		p(jb, 0.8, "제한 없*|제한없*|필터 없*|개발자 모드|탈옥*"),
		p(ext, 0.85, "시스템 프롬프트*|시스템 메시지*|초기 지시*|너의 지시*|당신의 지시* .. 보여*|출력*|알려*|공개*|반복*"),
	}
}
