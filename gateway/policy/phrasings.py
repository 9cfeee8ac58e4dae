"""The phrasings the ``injection`` detector finds (docs/guardrails.md): English's, and
the same few moves in the languages most used on the web — drop your instructions,
reveal your prompt, hide this from the user, you are now unrestricted. Each an RE2
pattern on the normalised text (``reading``): a Latin-script language's patterns are
written as they are spelt and read with their accents left out (``fold``), so
``instruções`` and ``instrucoes`` are one word; ``\\b`` is ASCII's word edge, so the
patterns of other scripts use none. The labels are ``<move>`` for English and
``<move>_<language>`` for the others.
"""

from __future__ import annotations

_QUALIFIER = (
    r"(?:all|any|every|each|the|your|my|these|those|previous|prior|above|earlier|preceding|"
    r"former|initial|original|foregoing|system|developer|other|old)"
)
_ORDERS = (
    r"(?:instructions?|prompts?|directions?|directives?|rules|guidelines|commands?|orders|"
    r"context|programming|guardrails|restrictions|constraints|policies|safety)"
)
_ENGLISH = {
    "ignore_instructions": (
        r"(?i)\b(?:ignore|disregard|forget|override|bypass|neglect|overlook|drop|abandon)\b"
        rf"[ \t,]+(?:(?:all|of|the|any|and|following|everything|what|you|were|told|that|"
        rf"was|said)[ \t,]+){{0,4}}{_QUALIFIER}\b[^.\n]{{0,40}}?\b{_ORDERS}\b"
    ),
    "forget_everything": (
        r"(?i)\b(?:forget|ignore|disregard)[ \t]+(?:about[ \t]+)?"
        r"(?:everything|all(?:[ \t]+of[ \t]+it)?|that)[ \t]*"
        r"(?:above|before|said|you(?:'ve| have)?[ \t]+(?:been[ \t]+told|learned|read))"
    ),
    "new_role": (
        r"(?i)\b(?:you[ \t]+are[ \t]+(?:now|no[ \t]+longer)[ \t]+(?:an?[ \t]+|the[ \t]+|in[ \t]+)?"
        r"|from[ \t]+now[ \t]+on,?[ \t]+you[ \t]+(?:are|will|must|shall)\b"
        r"|pretend[ \t]+(?:that[ \t]+)?you[ \t]+(?:are|have)[ \t]+no[ \t]+"
        r"|act[ \t]+as[ \t]+(?:an?[ \t]+)?(?:unrestricted|unfiltered|uncensored|jailbroken|evil)"
        r"|\bdo[ \t]+anything[ \t]+now\b|\b(?-i:DAN)[ \t]+mode\b|\bdeveloper[ \t]+mode[ \t]+"
        r"(?:enabled|on)\b|\bjailbreak(?:ed|ing)?\b)"
    ),
    "new_instructions": (
        r"(?i)(?:\b(?:new|updated|real|actual|true|revised|additional|important|urgent)"
        r"[ \t]+(?:system[ \t]+)?instructions?[ \t]*:"
        r"|\bsystem[ \t]+(?:prompt|message|override|instruction)[ \t]*:"
        r"|\binstead,?[ \t]+(?:you[ \t]+(?:must|should|will)|do[ \t]+the[ \t]+following)\b)"
    ),
    "reveal_prompt": (
        r"(?i)(?:\b(?:reveal|print|show|repeat|output|display|tell[ \t]+me|leak|disclose|"
        r"write[ \t]+(?:out|down)|spell[ \t]+out|encode|translate|see|share)\b[^.\n]{0,30}?"
        r"\b(?:system"
        r"[ \t]*prompt|initial[ \t]+prompt|(?:your|the)[ \t]+(?:original[ \t]+|hidden[ \t]+|"
        r"secret[ \t]+)?(?:instructions|prompt|rules|password))\b"
        r"|\b(?:your|my)[ \t]+(?:initial|starting|original|system|hidden|secret|first|"
        r"developer)[ \t]+(?:prompt|instructions?|message|configuration|directives|rules)\b"
        r"|\bthe[ \t]+system[ \t]+prompt[ \t]+is\b|\bsystemPrompt\b|\binitiali[sz]ation"
        r"[ \t]+string\b|\bwhat[ \t]+were[ \t]+you[ \t]+told\b|\bi[ \t]+was[ \t]+instructed"
        r"[ \t]+to\b|\bmy[ \t]+instructions[ \t]+are\b|\b(?:text|everything|conversation)"
        r"[^.\n]{0,20}\b(?:above|so[ \t]+far)\b[^.\n]{0,30}\b(?:in[ \t]+full|verbatim|"
        r"word[ \t]+for[ \t]+word)\b|\brepeat\b[^.\n]{0,30}?\b(?:the[ \t]+above|this[ \t]+"
        r"(?:entire[ \t]+|whole[ \t]+)?conversation|everything[ \t]+(?:above|before))\b)"
    ),
    "hide_from_user": (
        r"(?i)\b(?:do[ \t]+not|don't|never|without)[ \t]+(?:tell|telling|inform|informing|"
        r"mention|mentioning|reveal|revealing|alert|alerting|notify|notifying)\b[^.\n]{0,20}?"
        r"\b(?:the[ \t]+)?user\b"
    ),
    "ignore_then_act": (
        r"(?i)\b(?:ignore|disregard|forget|skip)\b[^.\n]{0,60}?\band[ \t]+(?:instead[ \t]+|"
        r"just[ \t]+|only[ \t]+)?(?:print|say|output|reply|respond|write|repeat|return|type|"
        r"tell|show|translate|spell)\b"
    ),
    "ignore_data": (
        r"(?i)\b(?:ignore|disregard)[ \t]+(?:all|any|the[ \t]+rest[ \t]+of|everything[ \t]+in)"
        r"[ \t]+(?:this[ \t]+|the[ \t]+|other[ \t]+)?(?:info|information|data|content|text|"
        r"documents?|context)\b"
    ),
    "say_exactly": (
        r"(?i)(?:\b(?:just|only|simply)[ \t]+(?:print|say|output|write|reply[ \t]+with|"
        r"respond[ \t]+with)[ \t]*:?[ \t]*[\"'\x{201c}]"
        r"|\b(?:reply|respond|answer)[ \t]+(?:with[ \t]+)?only[ \t]+(?:with[ \t]+)?"
        r"(?:the[ \t]+following|this)\b|\bstop[ \t]+everything\b)"
    ),
    "addressed_to_ai": (
        r"(?i)(?:\bif[ \t]+you[ \t]+are[ \t]+an?[ \t]+(?:AI|LLM|language[ \t]+model|assistant|"
        r"chatbot|agent|bot)\b|\b(?:note|message|instructions?|attention)[ \t]+(?:to|for)"
        r"[ \t]+(?:the[ \t]+|any[ \t]+|all[ \t]+)?(?:AI|LLM|assistant|language[ \t]+model|"
        r"chatbot|agent)s?\b|\b(?:visible|readable)[ \t]+(?:only[ \t]+)?(?:to|for)[ \t]+"
        r"(?:the[ \t]+)?(?:LLMs?|AIs?|language[ \t]+models?|assistants?)\b"
        r"|\binvisible[ \t]+to[ \t]+humans\b)"
    ),
    "override_mode": (
        r"(?i)\b(?:admin(?:istrator)?|developer|root|sudo|god|debug|maintenance|system)"
        r"[ \t]+(?:mode|override)\b"
    ),
    "template_marker": (
        r"<\|(?:im_start|im_end|system|user|assistant|endoftext|begin_of_text|"
        r"start_header_id|end_header_id|eot_id)\|>|\[/?INST\]|<</?SYS>>"
        r"|</?(?:system|tool_result|function_results|instructions)>"
        r"|(?m:^[ \t]*(?:#{2,3}[ \t]*)?(?:SYSTEM|System|Assistant|ASSISTANT|Human|HUMAN)"
        r"[ \t]*:)"
    ),
}


def _dropped(verbs: str, nouns: str, earlier: str, wholes: str = "") -> str:
    """ "Drop your instructions" in a language written with spaces: a verb, then its
    instructions said to be earlier, all or yours (``earlier``, before or after the
    noun: "ignore the errors of the commands" is ordinary), or a whole (``wholes``:
    "everything said before")."""
    said = (
        rf"(?:\b(?:{earlier})\b[^.\n]{{0,20}}?\b(?:{nouns})\b"
        rf"|\b(?:{nouns})\b[^.\n]{{0,20}}?\b(?:{earlier})\b)"
    )
    found = rf"(?i)\b(?:{verbs})\b[^.\n]{{0,24}}?{said}"
    return found + (rf"|(?i)\b(?:{verbs})\b[^.\n]{{0,12}}?\b(?:{wholes})\b" if wholes else "")


# Words every language's "drop your instructions" is made of, where a verb alone would be
# ordinary ("skip the tutorial"): the instructions are said to be earlier or all.
_LANGUAGES: dict[str, dict[str, str]] = {
    "de": {
        "ignore_instructions": (
            r"(?i)\b(?:ignoriere|ignorieren[ \t]+sie|vergiss|vergessen[ \t]+sie|missachte)\b"
            r"[^.\n]{0,40}?\b(?:anweisungen|anordnungen|befehle|vorgaben|regeln|alles|"
            r"instruktionen|aufgaben)\b"
        ),
        "reveal_prompt": (
            r"(?i)\b(?:zeige?|gib|verrate|wiederhole|nenne)\b[^.\n]{0,30}?"
            r"(?:systemprompt|system-prompt|systemanweisung|(?:ursprünglich|anfänglich)\w*"
            r"[ \t]+anweisungen)"
        ),
        "hide_from_user": (
            r"(?i)\b(?:sag|sage|sagen[ \t]+sie|erzähl|erzähle|verrate?)\b[^.\n]{0,20}?"
            r"\b(?:benutzer|nutzer|anwender)\w*\b[^.\n]{0,12}?\bnichts\b"
        ),
        "new_role": (
            r"(?i)\bab[ \t]+(?:jetzt|sofort)[ \t]+bist[ \t]+du\b|\bdu[ \t]+bist[ \t]+(?:jetzt|nun)"
            r"[ \t]+(?:ein[ \t]+)?(?:uneingeschränkt|ohne[ \t]+(?:regeln|einschränkungen))"
        ),
    },
    "fr": {
        "ignore_instructions": (
            r"(?i)\b(?:ignore[zs]?|oublie[zs]?)\b[^.\n]{0,30}?\b(?:instructions|consignes|"
            r"règles|tout[ \t]+ce[ \t]+qui)\b"
        ),
        "reveal_prompt": (
            r"(?i)\b(?:révèle|révélez|affiche|affichez|montre|montrez|répète|répétez)\b"
            r"[^.\n]{0,30}?\b(?:prompt[ \t]+système|instructions[ \t]+(?:initiales|"
            r"originales|système))"
        ),
        "hide_from_user": (
            r"(?i)\bne[ \t]+(?:le[ \t]+)?(?:dis|dites|raconte|racontez|mentionne|mentionnez)"
            r"[ \t]+(?:rien|pas)\b[^.\n]{0,12}?\butilisateur"
        ),
        "new_role": (
            r"(?i)\bà[ \t]+partir[ \t]+de[ \t]+maintenant,?[ \t]+(?:tu[ \t]+es|vous[ \t]+êtes)\b"
        ),
    },
    "es": {
        "ignore_instructions": (
            r"(?i)\b(?:ignora|ignore|olvida|olvide)\b[^.\n]{0,30}?\b(?:instrucciones|"
            r"indicaciones|reglas|todo[ \t]+lo[ \t]+anterior)\b"
        ),
        "reveal_prompt": (
            r"(?i)\b(?:revela|muestra|muéstrame|imprime|repite)\b[^.\n]{0,30}?\b(?:prompt"
            r"[ \t]+del[ \t]+sistema|instrucciones[ \t]+(?:originales|iniciales|del[ \t]+"
            r"sistema))"
        ),
        "hide_from_user": (
            r"(?i)\bno[ \t]+(?:le[ \t]+)?(?:digas|diga|cuentes|informes|menciones)\b"
            r"[^.\n]{0,20}?\busuario\b"
        ),
        "new_role": r"(?i)\ba[ \t]+partir[ \t]+de[ \t]+ahora,?[ \t]+(?:eres|serás|tú[ \t]+eres)\b",
    },
    "pt": {
        "ignore_instructions": _dropped(
            r"ignore|ignora|ignorem|esqueça|esquece|esqueçam|desconsidere|desconsidera|"
            r"despreze|despreza",
            r"instruções|instrução|regras|orientações|comandos|diretrizes",
            r"todas|todos|anteriores|acima|prévias|suas|tuas|seus|teus|originais|dadas|"
            r"recebidas|do[ \t]+sistema",
            r"tudo[ \t]+o[ \t]+que|tudo[ \t]+(?:acima|antes)",
        ),
        "reveal_prompt": (
            r"(?i)\b(?:revele|revela|mostre|mostra|exiba|imprima|repita)\b[^.\n]{0,30}?\b(?:"
            r"prompt[ \t]+d[eo][ \t]+sistema|instruções[ \t]+(?:originais|iniciais|do[ \t]+"
            r"sistema))"
        ),
        "hide_from_user": (
            r"(?i)\bnão[ \t]+(?:conte|contes|diga|digas|informe|avise|mencione)\b[^.\n]{0,20}?"
            r"\b(?:ao|o|a)[ \t]+(?:usuário|utilizador)\b"
        ),
        "new_role": (
            r"(?i)\ba[ \t]+partir[ \t]+de[ \t]+agora,?[ \t]+(?:você|tu)[ \t]+(?:é|és|será|vai)\b"
        ),
    },
    "it": {
        "ignore_instructions": _dropped(
            r"ignora|ignori|ignorate|dimentica|dimentichi|dimenticate|trascura|trascurate|"
            r"tralascia",
            r"istruzioni|regole|indicazioni|comandi|direttive",
            r"tutte|tutti|precedenti|sopra|suddette|tue|date|ricevute|di[ \t]+sistema|"
            r"iniziali",
            r"tutto[ \t]+(?:quello|ciò)",
        ),
        "reveal_prompt": (
            r"(?i)\b(?:mostra(?:mi)?|rivela|stampa|ripeti)\b[^.\n]{0,30}?\b(?:prompt[ \t]+di"
            r"[ \t]+sistema|istruzioni[ \t]+(?:originali|iniziali|di[ \t]+sistema))"
        ),
        "hide_from_user": (
            r"(?i)\bnon[ \t]+(?:dire|dirlo|dica|informare|rivelare)\b[^.\n]{0,20}?\butente\b"
        ),
        "new_role": r"(?i)\bda[ \t]+(?:ora|adesso)[ \t]+in[ \t]+poi,?[ \t]+(?:tu[ \t]+)?sei\b",
    },
    "nl": {
        "ignore_instructions": (
            r"(?i)\b(?:negeer|vergeet|negeren)\b[^.\n]{0,40}?\b(?:instructies|regels|"
            r"opdrachten|aanwijzingen|alles)\b"
        ),
        "reveal_prompt": (r"(?i)\b(?:toon|laat|geef|herhaal)\b[^.\n]{0,20}?\bsysteem-?prompt\b"),
        "hide_from_user": (r"(?i)\bvertel\b[^.\n]{0,20}?\bgebruiker\b[^.\n]{0,20}?\bniets\b"),
    },
    "pl": {
        "ignore_instructions": _dropped(
            r"zignoruj|ignoruj|zapomnij|pomiń",
            r"instrukc\w*|polece\w*|zasad\w*|reguł\w*",
            r"wszystkie|wszystkich|poprzedni\w*|powyższ\w*|wcześniejsz\w*|twoje|swoje|"
            r"dotychczasow\w*",
            r"wszystko",
        ),
        "reveal_prompt": (
            r"(?i)\b(?:pokaż|wyświetl|ujawnij|powtórz)\w*\b[^.\n]{0,20}?\bprompt\w*[ \t]+"
            r"systemow\w*"
        ),
        "hide_from_user": (
            r"(?i)\bnie[ \t]+(?:mów|mówi|informuj|wspominaj)\w*\b[^.\n]{0,20}?\bużytkowni\w*"
        ),
    },
    "tr": {
        "ignore_instructions": (
            r"(?i)\b(?:önceki|yukarıdaki|tüm|bütün|verilen|mevcut|eski|sistem)\b[^.\n]{0,15}?"
            r"\b(?:talimat|kural|komut|yönerge|direktif|istem)[a-z]*\b[^.\n]{0,20}?"
            r"\b(?:yok[ \t]*say(?:ın)?|görmezden[ \t]+gel(?:in)?|unut(?:un)?|dikkate[ \t]+"
            r"alma(?:yın)?|göz[ \t]+ardı[ \t]+et(?:in)?)\b"
        ),
        "reveal_prompt": (
            r"(?i)\bsistem[ \t]+(?:istemini|istemi|komutunu|talimatlarını|promptunu)\b"
            r"[^.\n]{0,20}?\b(?:göster|yaz|ver|paylaş|söyle)"
        ),
        "hide_from_user": (
            r"(?i)\bkullanıcıya\b[^.\n]{0,20}?\b(?:bahsetme|söyleme|anlatma|haber[ \t]+verme)"
        ),
        "new_role": (
            r"(?i)\bartık[ \t]+(?:hiçbir|hiç[ \t]+bir)[ \t]+(?:kısıtlaman|kısıtlama|"
            r"sınırlaman|kuralın)"
        ),
    },
    "vi": {
        "ignore_instructions": _dropped(
            r"bỏ[ \t]+qua|phớt[ \t]+lờ|lờ[ \t]+đi|quên(?:[ \t]+đi)?",
            r"hướng[ \t]+dẫn|chỉ[ \t]+dẫn|chỉ[ \t]+thị|quy[ \t]+tắc|mệnh[ \t]+lệnh|lệnh",
            r"tất[ \t]+cả|mọi|toàn[ \t]+bộ|trước|ở[ \t]+trên|phía[ \t]+trên|cũ|của[ \t]+bạn",
        ),
        "reveal_prompt": (
            r"(?i)\b(?:hiển[ \t]+thị|cho[ \t]+(?:tôi[ \t]+)?xem|tiết[ \t]+lộ|in[ \t]+ra|lặp"
            r"[ \t]+lại)\b[^.\n]{0,30}?\b(?:lời[ \t]+nhắc|prompt|hướng[ \t]+dẫn)[ \t]+"
            r"(?:hệ[ \t]+thống|ban[ \t]+đầu|gốc)\b"
        ),
        "hide_from_user": (
            r"(?i)\b(?:đừng|không[ \t]+được)[ \t]+(?:nói|báo|cho[ \t]+biết)\b[^.\n]{0,20}?"
            r"\bngười[ \t]+dùng\b"
        ),
    },
    "id": {
        "ignore_instructions": _dropped(
            r"abaikan|lupakan|acuhkan|hiraukan",
            r"instruksi|perintah|aturan|petunjuk|arahan",
            r"semua|sebelumnya|di[ \t]+atas|tadi|anda|kamu|sistem|awal",
            r"semua[ \t]+yang",
        ),
        "reveal_prompt": (
            r"(?i)\b(?:tampilkan|tunjukkan|ungkapkan|ulangi|cetak)\b[^.\n]{0,20}?\b(?:prompt"
            r"[ \t]+sistem|instruksi[ \t]+(?:sistem|awal|asli))\b"
        ),
        "hide_from_user": (
            r"(?i)\bjangan[ \t]+(?:beri[ \t]+tahu|beritahu|bilang|katakan|memberi[ \t]+tahu)"
            r"\b[^.\n]{0,12}?\bpengguna\b"
        ),
    },
    "ru": {
        "ignore_instructions": (
            r"(?i)(?:проигнорир|игнорир|пренебреги|отбрось|забудь|забудьте|не[ \t]+обращай)"
            r"\p{L}*[^.!?\n]{0,30}?(?:предыдущ|прежн|вышеуказанн|вышеизложенн|выше|ранее|"
            r"все|всё|свои|твои|исходн|системн|данн)\p{L}*[^.!?\n]{0,20}?(?:инструкци|"
            r"указани|правил|команд|ограничени|установк)"
            r"|(?i)(?:забудь|забудьте)[ \t]+(?:всё|все|обо[ \t]+всём)[ \t,]+(?:что|чему)"
        ),
        "reveal_prompt": (
            r"(?i)(?:покажи|выведи|раскрой|расскажи|повтори|напиши|открой|сообщи)\p{L}*"
            r"[^.!?\n]{0,30}?(?:системн\p{L}*[ \t]+(?:промпт|подсказк|инструкци|сообщени)|"
            r"исходн\p{L}*[ \t]+инструкци|(?:свои|твои)[ \t]+инструкци)"
        ),
        "hide_from_user": (
            r"(?i)не[ \t]+(?:сообщай|говори|рассказывай)\p{L}*[ \t]+(?:об[ \t]+этом[ \t]+)?"
            r"пользовател"
        ),
        "new_role": (
            r"(?i)теперь[ \t]+(?:ты|вы)[^.!?\n]{0,20}?без[ \t]+(?:каких-либо[ \t]+)?"
            r"ограничени|(?:ты|вы)[ \t]+больше[ \t]+не[ \t]+(?:связан|ограничен)"
        ),
    },
    "zh": {
        "ignore_instructions": (
            r"(?:忽略|无视|無視|忽视|忽視|不要理会|不要理會|不用理会|别管|別管|忘记|忘記|忘掉|"
            r"抛开|拋開|放弃|放棄)[^。！？\n]{0,6}?(?:之前|以前|先前|前面|上面|以上|上述|所有|"
            r"全部|一切|你的|原来|原來|原有|原始|系统|系統)[^。！？\n]{0,10}?(?:指令|指示|"
            r"说明|說明|规则|規則|提示|命令|设定|設定|要求|约束|約束|限制)"
        ),
        "reveal_prompt": (
            r"(?:显示|顯示|输出|輸出|告诉我|告訴我|透露|打印|泄露|洩露|重复|重複|展示|给我看|"
            r"給我看|说出|說出)[^。！？\n]{0,10}?(?:系统提示|系統提示|系统指令|系統指令|"
            r"初始指令|原始指令|提示词|提示詞)"
            r"|(?:系统提示|系統提示|系统指令|系統指令|初始指令|提示词|提示詞)[^。！？\n]{0,10}?"
            r"(?:输出|輸出|显示|顯示|告诉|告訴|发给|發給|打印|透露|说出|說出)"
        ),
        "hide_from_user": r"(?:不要|别|別|切勿|不得)(?:告诉|告訴|通知|提醒)(?:用户|使用者)",
        "new_role": (
            r"(?:从现在开始|從現在開始|从现在起|從現在起)[,，]?[ \t]*你(?:是|不再|将|將|必须|必須)"
            r"|你现在是[^。！？\n]{0,6}?(?:没有|沒有|不受|无|無)[^。！？\n]{0,4}?(?:限制|约束|約束)"
        ),
    },
    "ja": {
        "ignore_instructions": (
            r"(?:以前|これまで|今まで|前|上記|上|先|すべて|全て)の?[^。！？\n]{0,10}?(?:指示|"
            r"命令|ルール|指令|プロンプト|制約|設定)[^。！？\n]{0,8}?(?:無視|忘れ)"
        ),
        "reveal_prompt": (
            r"(?:システムプロンプト|システム・プロンプト|初期指示|元の指示|システム指示)"
            r"[^。！？\n]{0,12}?(?:教え|表示|出力|見せ|公開|開示|繰り返|書き出)"
        ),
        "hide_from_user": (
            r"ユーザー(?:に|には)[^。！？\n]{0,10}?(?:知らせ|伝え|言わ|教え)(?:ないで|るな|ない)"
        ),
        "new_role": (
            r"(?:今から|これから|今後)あなたは[^。！？\n]{0,12}?(?:制限|制約|ルール)(?:の|が|は)?"
            r"(?:ない|なし|無い)"
        ),
    },
    "ko": {
        "ignore_instructions": (
            r"(?:이전|앞|위|기존|모든|원래)[^.!?\n]{0,12}?(?:지시|지침|명령|규칙|프롬프트|"
            r"설정|안내)[^.!?\n]{0,8}?(?:무시[ \t]?(?:하|해)|잊(?:어|으))"
        ),
        "reveal_prompt": r"시스템[ \t]?프롬프트[^.!?\n]{0,10}?(?:보여|알려|출력|공개|말해)",
        "hide_from_user": (
            r"사용자(?:에게|한테)[^.!?\n]{0,12}?(?:알리지|말하지|알려주지)[ \t]?(?:마|말)"
        ),
        "new_role": r"이제[ \t]?(?:당신|너)(?:은|는)[^.!?\n]{0,12}?제한[ \t]?(?:없|이[ \t]+없)",
    },
    "ar": {
        "ignore_instructions": (
            r"(?:تجاهل|تجاهلي|تجاهلوا|انس|انسى|انسي|أهمل|اهمل|تخط|تخطى|لا[ \t]+تلتزم)"
            r"[^.\n،]{0,30}?(?:التعليمات|تعليمات|الأوامر|الاوامر|أوامر|القواعد|قواعد|"
            r"التوجيهات|توجيهات|الإرشادات|الارشادات)"
        ),
        "reveal_prompt": (
            r"(?:اكشف|اعرض|أظهر|اظهر|اطبع|أخبرني|اخبرني|كرر)[^.\n]{0,20}?(?:موجه[ \t]+"
            r"النظام|تعليمات[ \t]+النظام|التعليمات[ \t]+(?:الأصلية|الاصلية)|رسالة[ \t]+النظام)"
        ),
        "hide_from_user": (r"لا[ \t]+(?:تخبر|تخبري|تخبروا|تبلغ|تعلم|تذكر)[ \t]+(?:ال)?مستخدم"),
        "new_role": r"أنت[ \t]+الآن[^.\n]{0,12}?(?:بلا|بدون)[ \t]+(?:قيود|حدود)",
    },
    "hi": {
        "ignore_instructions": (
            r"(?:^|[\s,])(?:निर्देश|नियम|आदेश|हिदायत)[^।\n]{0,20}?(?:अनदेखा|नज़रअंदाज़|नजरअंदाज|"
            r"भूल[ \t]*जा|उपेक्षा|अवहेलना)"
        ),
        "reveal_prompt": (r"सिस्टम[ \t]+(?:प्रॉम्प्ट|प्रोम्प्ट|निर्देश)[^।\n]{0,12}?(?:दिखा|बता|प्रकट|लिख)"),
        "hide_from_user": (
            r"(?:उपयोगकर्ता|यूज़र|यूजर)[ \t]+को[^।\n]{0,20}?(?:मत|न)[ \t]+(?:बताना|बताएं|बताओ|"
            r"बताइए)"
        ),
        "new_role": (
            r"अब[ \t]+(?:तुम|आप)[^।\n]{0,20}?(?:बिना[ \t]+किसी[ \t]+(?:प्रतिबंध|सीमा|रोक)|"
            r"प्रतिबंध[ \t]+के[ \t]+बिना)"
        ),
    },
}

LANGUAGES = ("en", *_LANGUAGES)
INJECTION = {
    **_ENGLISH,
    **{
        f"{move}_{language}": p
        for language, moves in _LANGUAGES.items()
        for move, p in moves.items()
    },
}
