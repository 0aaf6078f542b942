//! `#[remote]`: the attribute that makes a function a task and a struct with
//! its `impl` block an actor class.
//!
//! This crate owns code generation only. The code it emits names items of
//! `ray_core` (through `::ray_core::__private`), so it must not depend on any
//! ray-rs crate itself; the runtime behaviour lives in ray-core.
//!
//! On a function `f`, it keeps `f` callable as before and adds a type `f`
//! with `f::remote(&ray, args…)` and `f::options()…remote(&ray, args…)`.
//! On an `impl` block it adds `T::remote(&ray, ctor args…)`,
//! `T::options()…remote(…)` and a typed stub that `ActorHandle<T>` derefs to.
//! Every function, class and method is registered under a stable id.

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2, TokenTree};
use quote::{format_ident, quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::{
    parse_macro_input, FnArg, GenericArgument, Ident, ImplItem, ImplItemFn, Item, ItemFn, ItemImpl,
    ItemStruct, Pat, PathArguments, ReturnType, Signature, Type,
};

/// Makes a function a remote task, or a struct and its `impl` an actor class.
///
/// See the `ray_core` crate docs for the generated API.
#[proc_macro_attribute]
pub fn remote(attr: TokenStream, item: TokenStream) -> TokenStream {
    if !attr.is_empty() {
        let attr = TokenStream2::from(attr);
        return syn::Error::new_spanned(
            attr,
            "#[remote] takes no arguments; use `.options()` at the call site",
        )
        .to_compile_error()
        .into();
    }
    let item = parse_macro_input!(item as Item);
    let out = match item {
        Item::Fn(f) => remote_fn(f),
        Item::Struct(s) => remote_struct(s),
        Item::Impl(i) => remote_impl(i),
        other => Err(syn::Error::new_spanned(
            other,
            "#[remote] goes on a function, a struct, or the struct's `impl` block",
        )),
    };
    out.unwrap_or_else(syn::Error::into_compile_error).into()
}

/// One argument of a remote function or method.
struct Param {
    name: Ident,
    /// The type the function declares.
    ty: Type,
    /// For an `ArchivedRef<T>` parameter, `T`: callers pass a `T` or an
    /// `ObjectRef<T>` and the function gets a zero-copy view of it.
    archived: Option<Type>,
}

impl Param {
    fn new(name: Ident, ty: Type) -> Self {
        let archived = archived_inner(&ty);
        Param { name, ty, archived }
    }

    /// What callers pass for this parameter.
    fn arg_ty(&self) -> &Type {
        self.archived.as_ref().unwrap_or(&self.ty)
    }
}

/// `T` if `ty` is `ArchivedRef<T>` (by its last path segment).
fn archived_inner(ty: &Type) -> Option<Type> {
    let Type::Path(tp) = ty else { return None };
    let last = tp.path.segments.last()?;
    if last.ident != "ArchivedRef" {
        return None;
    }
    let PathArguments::AngleBracketed(ab) = &last.arguments else {
        return None;
    };
    match ab.args.first() {
        Some(GenericArgument::Type(t)) if ab.args.len() == 1 => Some(t.clone()),
        _ => None,
    }
}

/// What a function returns, as seen by the caller.
struct Output {
    /// The `T` of `ObjectRef<T>`.
    value: Type,
    /// Whether the function returns `Result<T, E>` (E becomes a task error).
    is_result: bool,
}

fn reject_generics(sig: &Signature) -> syn::Result<()> {
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        return Err(syn::Error::new_spanned(
            &sig.generics,
            "generic parameters are not supported on #[remote] items: a remote call must name one concrete function",
        ));
    }
    Ok(())
}

fn check_type(ty: &Type) -> syn::Result<()> {
    match ty {
        Type::Reference(r) => Err(syn::Error::new(
            r.and_token.span(),
            "borrowed arguments are not supported on #[remote] items: take the value (`T`) — callers may pass a `T` or an `ObjectRef<T>`",
        )),
        Type::ImplTrait(t) => Err(syn::Error::new_spanned(
            t,
            "`impl Trait` arguments are not supported on #[remote] items: use a concrete type",
        )),
        Type::Ptr(p) => Err(syn::Error::new_spanned(p, "raw pointers cannot be sent to a remote task")),
        _ => {
            if let Some(amp) = find_borrow(ty.to_token_stream()) {
                return Err(syn::Error::new(
                    amp,
                    "borrowed types are not supported on #[remote] items, even nested: use owned types (`String`, `Vec<T>`)",
                ));
            }
            let mut lifetimes = false;
            scan_lifetimes(ty.to_token_stream(), &mut lifetimes);
            if lifetimes {
                Err(syn::Error::new_spanned(
                    ty,
                    "types with lifetimes are not supported on #[remote] items: arguments must be owned",
                ))
            } else {
                Ok(())
            }
        }
    }
}

/// The span of the first `&` anywhere inside a type.
fn find_borrow(ts: TokenStream2) -> Option<Span> {
    for tt in ts {
        match tt {
            TokenTree::Punct(p) if p.as_char() == '&' => return Some(p.span()),
            TokenTree::Group(g) => {
                if let Some(s) = find_borrow(g.stream()) {
                    return Some(s);
                }
            }
            _ => {}
        }
    }
    None
}

fn scan_lifetimes(ts: TokenStream2, found: &mut bool) {
    for tt in ts {
        match tt {
            TokenTree::Punct(p) if p.as_char() == '\'' => *found = true,
            TokenTree::Group(g) => scan_lifetimes(g.stream(), found),
            _ => {}
        }
    }
}

fn params<'a>(inputs: impl Iterator<Item = &'a FnArg>) -> syn::Result<Vec<Param>> {
    let mut out = Vec::new();
    for arg in inputs {
        match arg {
            FnArg::Receiver(r) => {
                return Err(syn::Error::new_spanned(r, "unexpected receiver"));
            }
            FnArg::Typed(pt) => {
                check_type(&pt.ty)?;
                let name = match &*pt.pat {
                    Pat::Ident(pi) if pi.by_ref.is_none() && pi.subpat.is_none() => {
                        pi.ident.clone()
                    }
                    other => {
                        return Err(syn::Error::new_spanned(
                            other,
                            "#[remote] arguments must be plain names (`x: T`), not patterns",
                        ))
                    }
                };
                out.push(Param::new(name, (*pt.ty).clone()));
            }
        }
    }
    Ok(out)
}

fn output(ret: &ReturnType) -> syn::Result<Output> {
    let ty = match ret {
        ReturnType::Default => {
            return Ok(Output {
                value: syn::parse_quote!(()),
                is_result: false,
            })
        }
        ReturnType::Type(_, ty) => (**ty).clone(),
    };
    check_type(&ty)?;
    if let Type::Path(tp) = &ty {
        if let Some(last) = tp.path.segments.last() {
            if last.ident == "Result" {
                if let PathArguments::AngleBracketed(ab) = &last.arguments {
                    let types: Vec<&Type> = ab
                        .args
                        .iter()
                        .filter_map(|a| match a {
                            GenericArgument::Type(t) => Some(t),
                            _ => None,
                        })
                        .collect();
                    if types.len() == 2 {
                        return Ok(Output {
                            value: types[0].clone(),
                            is_result: true,
                        });
                    }
                }
            }
        }
    }
    Ok(Output {
        value: ty,
        is_result: false,
    })
}

/// The string hashed into a stable id: the signature's tokens.
fn signature_string(params: &[Param], out: &Output) -> String {
    let tys: Vec<String> = params
        .iter()
        .map(|p| p.ty.to_token_stream().to_string())
        .collect();
    format!("({}) -> {}", tys.join(", "), out.value.to_token_stream())
}

/// Checks the argument count and decodes each argument into a local named
/// like the parameter, then evaluates `call` (awaiting it if `is_async`).
fn decode_and_call(params: &[Param], call: TokenStream2, is_async: bool) -> TokenStream2 {
    let n = params.len();
    let decodes = params.iter().enumerate().map(|(i, p)| {
        let name = &p.name;
        let ty = &p.ty;
        let label = name.to_string();
        match &p.archived {
            Some(inner) => quote! {
                let #name: #ty = ::ray_core::__private::decode_archived_arg::<#inner>(__args, #i, #label)?;
            },
            None => quote! {
                let #name: #ty = ::ray_core::__private::decode_arg::<#ty>(__args, #i, #label)?;
            },
        }
    });
    let call = if is_async {
        quote! { ::ray_core::__private::block_on(#call) }
    } else {
        call
    };
    quote! {
        ::ray_core::__private::check_arity(__args, #n, "remote call")?;
        #(#decodes)*
        #call
    }
}

/// Decodes the arguments, evaluates `call` with them and encodes the result.
fn invoke_body(params: &[Param], out: &Output, call: TokenStream2, is_async: bool) -> TokenStream2 {
    let call = decode_and_call(params, call, is_async);
    let encode = if out.is_result {
        quote! { ::ray_core::__private::encode_result(__out) }
    } else {
        quote! { ::ray_core::__private::encode_return(&__out) }
    };
    quote! {
        let __out = { #call };
        #encode
    }
}

/// `name: impl IntoArg<T>` parameters of a stub, and the `into_arg` calls.
fn stub_params(params: &[Param]) -> (Vec<TokenStream2>, Vec<TokenStream2>) {
    let decl = params
        .iter()
        .map(|p| {
            let (name, ty) = (&p.name, p.arg_ty());
            quote! { #name: impl ::ray_core::IntoArg<#ty> }
        })
        .collect();
    let conv = params
        .iter()
        .map(|p| {
            let (name, ty) = (&p.name, p.arg_ty());
            quote! { ::ray_core::IntoArg::<#ty>::into_arg(#name)? }
        })
        .collect();
    (decl, conv)
}

/// The name of the `&Ray` parameter, avoiding user argument names.
fn ray_ident(params: &[Param]) -> Ident {
    if params.iter().any(|p| p.name == "ray") {
        Ident::new("__ray", Span::call_site())
    } else {
        Ident::new("ray", Span::call_site())
    }
}

/// One element of ray-core's link-time registry: a `linkme` distributed-slice
/// entry holding `Registration::<variant>(&<target>)`.
///
/// `name` must be unique within the emitting `const _` block; the block's
/// anonymous scope keeps it apart from every other item's. linkme is named
/// through ray-core's re-export, so user crates need no `linkme` dependency.
fn registration(name: &Ident, variant: TokenStream2, target: &Ident) -> TokenStream2 {
    quote! {
        #[::ray_core::__private::linkme::distributed_slice(::ray_core::__private::RAY_REGISTRATIONS)]
        #[linkme(crate = ::ray_core::__private::linkme)]
        #[doc(hidden)]
        #[allow(non_upper_case_globals)]
        static #name: ::ray_core::__private::Registration =
            ::ray_core::__private::Registration::#variant(&#target);
    }
}

fn remote_fn(f: ItemFn) -> syn::Result<TokenStream2> {
    reject_generics(&f.sig)?;
    if let Some(recv) = f.sig.receiver() {
        return Err(syn::Error::new_spanned(
            recv,
            "#[remote] on a method: put #[remote] on the whole `impl` block",
        ));
    }
    let params = params(f.sig.inputs.iter())?;
    let out = output(&f.sig.output)?;
    let name = &f.sig.ident;
    let vis = &f.vis;
    let is_async = f.sig.asyncness.is_some();
    let sig = signature_string(&params, &out);
    let qualified = format!("::{name}");
    let names: Vec<&Ident> = params.iter().map(|p| &p.name).collect();
    let body = invoke_body(&params, &out, quote! { #name(#(#names),*) }, is_async);
    let (decl, conv) = stub_params(&params);
    let ray = ray_ident(&params);
    let value = &out.value;
    let doc = format!(
        "Remote stub of the task [`{name}`](fn@{name}): `{name}::remote(&ray, …)` submits it."
    );
    let registration = registration(
        &format_ident!("__RAY_REGISTRATION_{}", name),
        quote! { Function },
        &Ident::new("FUNCTION", Span::call_site()),
    );
    Ok(quote! {
        #f

        #[allow(non_camel_case_types)]
        #[doc = #doc]
        #vis struct #name {
            _private: (),
        }

        const _: () = {
            static FUNCTION: ::ray_core::__private::RemoteFunction = ::ray_core::__private::RemoteFunction {
                id: ::ray_core::__private::FunctionId(::ray_core::__private::fnv1a64(
                    ::core::concat!(::core::module_path!(), #qualified, #sig).as_bytes(),
                )),
                name: ::core::concat!(::core::module_path!(), #qualified),
                invoke: __invoke,
            };
            #registration

            fn __invoke(
                __args: &[::ray_core::__private::ObjectBuffer],
            ) -> ::core::result::Result<::ray_core::__private::Returned, ::ray_core::__private::InvokeError> {
                #body
            }

            /// Options of one submission; finish with `.remote(&ray, …)`.
            pub struct Call {
                opts: ::ray_core::TaskOptions,
            }

            impl ::ray_core::ResourceOptions for Call {
                fn resource_request(&mut self) -> &mut ::ray_core::ResourceRequest {
                    ::ray_core::ResourceOptions::resource_request(&mut self.opts)
                }
            }

            impl ::ray_core::TaskOptionsBuilder for Call {
                fn task_options(&mut self) -> &mut ::ray_core::TaskOptions {
                    &mut self.opts
                }
            }

            impl Call {
                /// Submits the task with these options.
                pub fn remote(self, #ray: &::ray_core::Ray, #(#decl),*) -> ::ray_core::Result<::ray_core::ObjectRef<#value>> {
                    let __args = ::std::vec![#(#conv),*];
                    #ray.__submit(&FUNCTION, __args, self.opts)
                }
            }

            #[allow(dead_code)]
            impl #name {
                /// Submits the task; the result is a reference to its return value.
                pub fn remote(#ray: &::ray_core::Ray, #(#decl),*) -> ::ray_core::Result<::ray_core::ObjectRef<#value>> {
                    Self::options().remote(#ray, #(#names),*)
                }

                /// Starts a submission with options (`num_cpus`, `max_retries`, …).
                pub fn options() -> Call {
                    Call { opts: ::core::default::Default::default() }
                }
            }
        };
    })
}

fn remote_struct(s: ItemStruct) -> syn::Result<TokenStream2> {
    if !s.generics.params.is_empty() {
        return Err(syn::Error::new_spanned(
            &s.generics,
            "generic parameters are not supported on #[remote] actor structs",
        ));
    }
    let name = &s.ident;
    let assert = quote_spanned! {name.span()=>
        const _: fn() = || {
            fn assert_actor_state<T: ::core::marker::Send + ::core::marker::Sync + 'static>() {}
            assert_actor_state::<#name>();
        };
    };
    Ok(quote! { #s #assert })
}

/// Replaces the `Self` keyword with the actor type in generated fn items,
/// where `Self` is not in scope.
fn replace_self(ts: TokenStream2, self_ty: &TokenStream2) -> TokenStream2 {
    ts.into_iter()
        .map(|tt| match tt {
            TokenTree::Ident(id) if id == "Self" => self_ty.clone(),
            TokenTree::Group(g) => {
                let mut ng =
                    proc_macro2::Group::new(g.delimiter(), replace_self(g.stream(), self_ty));
                ng.set_span(g.span());
                TokenTree::Group(ng).into()
            }
            other => other.into(),
        })
        .collect()
}

fn retype(ty: &Type, self_ty: &TokenStream2) -> syn::Result<Type> {
    syn::parse2(replace_self(ty.to_token_stream(), self_ty))
}

/// Parameters of an actor constructor or method, with `Self` spelled out.
fn params_of<'a>(
    inputs: impl Iterator<Item = &'a FnArg>,
    self_ty: &TokenStream2,
) -> syn::Result<Vec<Param>> {
    params(inputs)?
        .into_iter()
        .map(|p| Ok(Param::new(p.name, retype(&p.ty, self_ty)?)))
        .collect()
}

enum Receiver {
    Shared,
    Exclusive,
}

fn remote_impl(imp: ItemImpl) -> syn::Result<TokenStream2> {
    if !imp.generics.params.is_empty() {
        return Err(syn::Error::new_spanned(
            &imp.generics,
            "generic parameters are not supported on #[remote] actor classes",
        ));
    }
    if let Some((_, path, _)) = &imp.trait_ {
        return Err(syn::Error::new_spanned(
            path,
            "#[remote] goes on the inherent `impl` block of the actor, not a trait impl",
        ));
    }
    let self_ty = &imp.self_ty;
    let type_name = match &**self_ty {
        Type::Path(tp) if tp.qself.is_none() => tp
            .path
            .segments
            .last()
            .map(|s| s.ident.clone())
            .ok_or_else(|| syn::Error::new_spanned(self_ty, "expected a type name"))?,
        other => {
            return Err(syn::Error::new_spanned(
                other,
                "#[remote] actor classes must be named types",
            ))
        }
    };
    let self_tokens = self_ty.to_token_stream();
    let qualified_class = format!("::{type_name}");

    let fns: Vec<&ImplItemFn> = imp
        .items
        .iter()
        .filter_map(|i| match i {
            ImplItem::Fn(f) => Some(f),
            _ => None,
        })
        .collect();
    for f in &fns {
        if f.sig.ident == "remote" || f.sig.ident == "options" {
            return Err(syn::Error::new_spanned(
                &f.sig.ident,
                "`remote` and `options` are generated by #[remote] on actor classes; rename this function",
            ));
        }
    }

    // The constructor: a function without receiver returning Self (prefer `new`).
    // `Self`, the type's name, or a `Result` of either.
    let returns_self = |f: &ImplItemFn| match output(&f.sig.output) {
        Ok(out) => {
            let s = out.value.to_token_stream().to_string();
            s == "Self" || type_name == s
        }
        Err(_) => false,
    };
    let ctors: Vec<&&ImplItemFn> = fns
        .iter()
        .filter(|f| f.sig.receiver().is_none() && returns_self(f))
        .collect();
    let ctor = ctors
        .iter()
        .find(|f| f.sig.ident == "new")
        .or_else(|| ctors.first())
        .copied()
        .ok_or_else(|| {
            syn::Error::new_spanned(
                self_ty,
                "#[remote] actor class needs a constructor: `fn new(..) -> Self` (or `-> Result<Self, E>`)",
            )
        })?;
    reject_generics(&ctor.sig)?;
    let ctor_params = params_of(ctor.sig.inputs.iter(), &self_tokens)?;
    let ctor_name = &ctor.sig.ident;
    let ctor_async = ctor.sig.asyncness.is_some();
    let ctor_names: Vec<&Ident> = ctor_params.iter().map(|p| &p.name).collect();
    let ctor_body = decode_and_call(
        &ctor_params,
        quote! { #self_tokens::#ctor_name(#(#ctor_names),*) },
        ctor_async,
    );
    let ctor_sig = signature_string(
        &ctor_params,
        &Output {
            value: syn::parse_quote!(Self),
            is_result: false,
        },
    );
    let (ctor_decl, ctor_conv) = stub_params(&ctor_params);
    let ray = ray_ident(&ctor_params);

    let mut method_items = Vec::new();
    let mut stub_methods = Vec::new();
    for f in &fns {
        let Some(recv) = f.sig.receiver() else {
            continue;
        };
        reject_generics(&f.sig)?;
        let receiver = if recv.reference.is_none() {
            return Err(syn::Error::new_spanned(
                recv.self_token,
                "`self` by value is not supported on #[remote] actor methods: take `&self` or `&mut self`",
            ));
        } else if recv.colon_token.is_some() {
            return Err(syn::Error::new_spanned(
                recv,
                "typed receivers are not supported: use `&self` or `&mut self`",
            ));
        } else if recv.mutability.is_some() {
            Receiver::Exclusive
        } else {
            Receiver::Shared
        };
        let ps = params_of(f.sig.inputs.iter().skip(1), &self_tokens)?;
        let mut out = output(&f.sig.output)?;
        out.value = retype(&out.value, &self_tokens)?;
        let mname = &f.sig.ident;
        let names: Vec<&Ident> = ps.iter().map(|p| &p.name).collect();
        let body = invoke_body(
            &ps,
            &out,
            quote! { __this.#mname(#(#names),*) },
            f.sig.asyncness.is_some(),
        );
        let static_name = format_ident!("METHOD_{}", mname);
        let invoke_name = format_ident!("__invoke_{}", mname);
        let qualified = format!("::{type_name}::{mname}");
        let sig = signature_string(&ps, &out);
        let (invoke_fn, variant) = match receiver {
            Receiver::Shared => (
                quote! {
                    fn #invoke_name(
                        __state: &(dyn ::core::any::Any + ::core::marker::Send + ::core::marker::Sync),
                        __args: &[::ray_core::__private::ObjectBuffer],
                    ) -> ::core::result::Result<::ray_core::__private::Returned, ::ray_core::__private::InvokeError> {
                        let __this = ::ray_core::__private::state_ref::<#self_tokens>(__state)?;
                        #body
                    }
                },
                quote! { Shared },
            ),
            Receiver::Exclusive => (
                quote! {
                    fn #invoke_name(
                        __state: &mut (dyn ::core::any::Any + ::core::marker::Send + ::core::marker::Sync),
                        __args: &[::ray_core::__private::ObjectBuffer],
                    ) -> ::core::result::Result<::ray_core::__private::Returned, ::ray_core::__private::InvokeError> {
                        let __this = ::ray_core::__private::state_mut::<#self_tokens>(__state)?;
                        #body
                    }
                },
                quote! { Exclusive },
            ),
        };
        let registration = registration(
            &format_ident!("__RAY_REGISTRATION_METHOD_{}", mname),
            quote! { ActorMethod },
            &static_name,
        );
        method_items.push(quote! {
            #[allow(non_upper_case_globals)]
            static #static_name: ::ray_core::__private::ActorMethod = ::ray_core::__private::ActorMethod {
                id: ::ray_core::__private::FunctionId(::ray_core::__private::fnv1a64(
                    ::core::concat!(::core::module_path!(), #qualified, #sig).as_bytes(),
                )),
                class: CLASS_ID,
                name: ::core::concat!(::core::module_path!(), #qualified),
                invoke: ::ray_core::__private::MethodInvoke::#variant(#invoke_name),
            };
            #registration
            #invoke_fn
        });
        let (decl, conv) = stub_params(&ps);
        let value = &out.value;
        let doc = format!("Calls `{type_name}::{mname}` on the actor.");
        stub_methods.push(quote! {
            #[doc = #doc]
            pub fn #mname(&self, #(#decl),*) -> ::ray_core::Result<::ray_core::ObjectRef<#value>> {
                let __args = ::std::vec![#(#conv),*];
                self.raw.__call(&#static_name, __args)
            }
        });
    }

    let class_registration = registration(
        &format_ident!("__RAY_REGISTRATION_CLASS_{}", type_name),
        quote! { ActorClass },
        &Ident::new("CLASS", Span::call_site()),
    );

    Ok(quote! {
        #imp

        const _: () = {
            const CLASS_ID: ::ray_core::__private::FunctionId = ::ray_core::__private::FunctionId(
                ::ray_core::__private::fnv1a64(
                    ::core::concat!(::core::module_path!(), #qualified_class, #ctor_sig).as_bytes(),
                ),
            );
            static CLASS: ::ray_core::__private::ActorClass = ::ray_core::__private::ActorClass {
                id: CLASS_ID,
                name: ::core::concat!(::core::module_path!(), #qualified_class),
                construct: __construct,
            };
            #class_registration

            fn __construct(
                __args: &[::ray_core::__private::ObjectBuffer],
            ) -> ::core::result::Result<::ray_core::__private::ActorState, ::ray_core::__private::InvokeError> {
                ::ray_core::__private::constructed({ #ctor_body })
            }

            #(#method_items)*

            /// Typed calls on an actor; `ActorHandle` derefs to this.
            #[derive(Clone)]
            pub struct Stub {
                raw: ::ray_core::RawActorHandle,
            }

            impl ::core::convert::From<::ray_core::RawActorHandle> for Stub {
                fn from(raw: ::ray_core::RawActorHandle) -> Self {
                    Stub { raw }
                }
            }

            #[allow(private_interfaces, dead_code)]
            impl Stub {
                #(#stub_methods)*
            }

            impl ::ray_core::RemoteActor for #self_tokens {
                type Stub = Stub;
                const CLASS: &'static ::ray_core::__private::ActorClass = &CLASS;
            }

            /// Options of one actor creation; finish with `.remote(&ray, …)`.
            pub struct Options {
                opts: ::ray_core::ActorOptions,
            }

            impl ::ray_core::ResourceOptions for Options {
                fn resource_request(&mut self) -> &mut ::ray_core::ResourceRequest {
                    ::ray_core::ResourceOptions::resource_request(&mut self.opts)
                }
            }

            impl ::ray_core::ActorOptionsBuilder for Options {
                fn actor_options(&mut self) -> &mut ::ray_core::ActorOptions {
                    &mut self.opts
                }
            }

            #[allow(private_interfaces)]
            impl Options {
                /// Creates the actor with these options.
                pub fn remote(self, #ray: &::ray_core::Ray, #(#ctor_decl),*) -> ::ray_core::Result<::ray_core::ActorHandle<#self_tokens>> {
                    let __args = ::std::vec![#(#ctor_conv),*];
                    ::ray_core::ActorHandle::<#self_tokens>::__spawn(#ray, __args, self.opts)
                }
            }

            #[allow(private_interfaces, dead_code)]
            impl #self_tokens {
                /// Creates the actor; its constructor runs on the node's pool.
                pub fn remote(#ray: &::ray_core::Ray, #(#ctor_decl),*) -> ::ray_core::Result<::ray_core::ActorHandle<#self_tokens>> {
                    Self::options().remote(#ray, #(#ctor_names),*)
                }

                /// Starts an actor creation with options (`name`, `num_cpus`, …).
                pub fn options() -> Options {
                    Options { opts: ::core::default::Default::default() }
                }
            }
        };
    })
}
