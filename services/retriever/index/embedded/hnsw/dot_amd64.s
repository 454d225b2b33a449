//go:build amd64 && !purego

#include "textflag.h"

// func dotAVX2(a, b *float32, n int) float32
TEXT ·dotAVX2(SB), NOSPLIT, $0-28
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DI
	MOVQ n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

loop32:
	CMPQ CX, $32
	JL   loop8
	VMOVUPS (SI), Y4
	VMOVUPS 32(SI), Y5
	VMOVUPS 64(SI), Y6
	VMOVUPS 96(SI), Y7
	VFMADD231PS (DI), Y4, Y0
	VFMADD231PS 32(DI), Y5, Y1
	VFMADD231PS 64(DI), Y6, Y2
	VFMADD231PS 96(DI), Y7, Y3
	ADDQ $128, SI
	ADDQ $128, DI
	SUBQ $32, CX
	JMP  loop32

loop8:
	CMPQ CX, $8
	JL   reduce
	VMOVUPS (SI), Y4
	VFMADD231PS (DI), Y4, Y0
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JMP  loop8

reduce:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0

tail:
	CMPQ CX, $0
	JE   done
	VMOVSS (SI), X1
	VFMADD231SS (DI), X1, X0
	ADDQ $4, SI
	ADDQ $4, DI
	DECQ CX
	JMP  tail

done:
	VZEROUPPER
	MOVSS X0, ret+24(FP)
	RET

// func dotI8AVX2(a, b *int8, n int) int32
// Codes are in [-127, 127]. 32 bytes at a time: |a| (VPABSB) times b with a's sign (VPSIGNB) multiplied and
// added in pairs into 16 words (VPMADDUBSW: |a|·b ≤ 127², pairs ≤ 2·127² < 2^15, no saturation), then pairs of
// words into 8 dwords (VPMADDWD by ones), accumulated in two registers; then 16 bytes by sign extension.
TEXT ·dotI8AVX2(SB), NOSPLIT, $0-28
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DI
	MOVQ n+16(FP), CX
	VPXOR    Y0, Y0, Y0
	VPXOR    Y1, Y1, Y1
	VPCMPEQW Y15, Y15, Y15
	VPSRLW   $15, Y15, Y15

i8loop64:
	CMPQ CX, $64
	JL   i8loop32
	VMOVDQU    (SI), Y2
	VMOVDQU    (DI), Y3
	VPABSB     Y2, Y4
	VPSIGNB    Y2, Y3, Y3
	VPMADDUBSW Y3, Y4, Y4
	VPMADDWD   Y15, Y4, Y4
	VPADDD     Y4, Y0, Y0
	VMOVDQU    32(SI), Y5
	VMOVDQU    32(DI), Y6
	VPABSB     Y5, Y7
	VPSIGNB    Y5, Y6, Y6
	VPMADDUBSW Y6, Y7, Y7
	VPMADDWD   Y15, Y7, Y7
	VPADDD     Y7, Y1, Y1
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $64, CX
	JMP  i8loop64

i8loop32:
	CMPQ CX, $32
	JL   i8loop16
	VMOVDQU    (SI), Y2
	VMOVDQU    (DI), Y3
	VPABSB     Y2, Y4
	VPSIGNB    Y2, Y3, Y3
	VPMADDUBSW Y3, Y4, Y4
	VPMADDWD   Y15, Y4, Y4
	VPADDD     Y4, Y0, Y0
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $32, CX

i8loop16:
	CMPQ CX, $16
	JL   i8reduce
	VPMOVSXBW (SI), Y2
	VPMOVSXBW (DI), Y3
	VPMADDWD  Y3, Y2, Y2
	VPADDD    Y2, Y1, Y1
	ADDQ $16, SI
	ADDQ $16, DI
	SUBQ $16, CX

i8reduce:
	VPADDD       Y1, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPADDD       X1, X0, X0
	VPHADDD      X0, X0, X0
	VPHADDD      X0, X0, X0
	VMOVD        X0, AX

i8tail:
	CMPQ CX, $0
	JE   i8done
	MOVBLSX (SI), R8
	MOVBLSX (DI), R9
	IMULL R9, R8
	ADDL  R8, AX
	INCQ SI
	INCQ DI
	DECQ CX
	JMP  i8tail

i8done:
	VZEROUPPER
	MOVL AX, ret+24(FP)
	RET
